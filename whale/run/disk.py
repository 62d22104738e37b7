"""What a run keeps on disk: bytes per kind of file, and which weights checkpoints retention keeps.

Checkpoints dominate a long run's disk use (weights plus optimizer state at every evaluation point and
phase switch), so `checkpoints.keep_every` thins them; traces and the archive are what the proposer and
the report read, and are never deleted.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from whale.model.trainer import Trainer
from whale.run.rundir import CHECKPOINTS, SEARCH, RunDir

# Where each kind of file lives in a run directory (see whale.run.experiment).
KINDS = {
    "checkpoints": (CHECKPOINTS,),
    "traces": ("rollouts", "evals"),
    "archive": (SEARCH,),
}


def folder_bytes(path: Path) -> int:
    """Bytes of every regular file under `path` (0 when it does not exist)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def run_storage(run: Path) -> dict[str, int]:
    """Bytes on disk now per kind (checkpoints, traces, archive), the rest of the run folder, and total."""
    sizes = {kind: sum(folder_bytes(run / name) for name in names) for kind, names in KINDS.items()}
    sizes["total"] = folder_bytes(run)
    sizes["other"] = sizes["total"] - sum(sizes[kind] for kind in KINDS)
    return sizes


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def storage_line(run: Path, state: dict[str, Any]) -> str:
    """One line for `whale status` and `whale agents`: what each kind of file takes, and what retention
    saved (checkpoint bytes written over the run's life vs. kept now)."""
    sizes = run_storage(run)
    kept = len(list((run / CHECKPOINTS).glob("u*"))) if (run / CHECKPOINTS).is_dir() else 0
    written = state.get("checkpoint_bytes", 0)
    return (
        f"storage: {human_bytes(sizes['total'])} in all; checkpoints {human_bytes(sizes['checkpoints'])} "
        f"({kept} kept, {human_bytes(written)} written), traces {human_bytes(sizes['traces'])}, "
        f"archive {human_bytes(sizes['archive'])}"
    )


def retained_checkpoints(points: list[dict[str, Any]], keep_every: int, keep_best: int) -> set[str]:
    """Checkpoints that retention keeps, from the evaluation records (each names its checkpoint): those of
    every `keep_every`-th point (0, N, 2N, ...) and of the `keep_best` best points by validation mean@k
    (ties: the earliest, as in the summary). The caller also keeps the latest, which resume needs."""
    keep = {p.get("checkpoint") for p in points if p["point"] % keep_every == 0}
    ranked = sorted(points, key=lambda p: (-p["val"]["mean"], p["point"]))
    keep |= {p.get("checkpoint") for p in ranked[:keep_best]}
    return {name for name in keep if name}


def save_checkpoint(trainer: Trainer, run: RunDir, name: str) -> int:
    """The trainer's weights as checkpoint folder `name`, written whole or not at all; its bytes."""
    tmp = run.checkpoint(f".{name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    trainer.save(tmp)
    size = folder_bytes(tmp)
    tmp.rename(run.checkpoint(name))
    return size
