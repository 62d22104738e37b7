"""A run folder's files as the report reads them (read-only, so it works on a run in progress)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whale.run.rundir import SEARCH, RunDir
from whale.run.summary import run_summary


@dataclass
class RunFiles:
    """Everything a run report reads, loaded once."""

    path: Path
    config: dict[str, Any]
    state: dict[str, Any]
    events: list[dict[str, Any]]
    points: list[dict[str, Any]]
    candidates: list[dict[str, Any]]  # meta.json plus `score` and `weights` of the latest evaluation
    summary: dict[str, Any] | None  # before/after/best numbers and the harness diff; None before any eval


def load_run(path: Path) -> RunFiles:
    run = RunDir(path)
    config, state, points = run.read_config(), run.read_state(), run.points()
    candidates = load_candidates(run / SEARCH)
    return RunFiles(
        path,
        config,
        state,
        run.events(),
        points,
        candidates,
        run_summary(path),
    )


def load_candidates(search: Path) -> list[dict[str, Any]]:
    """Every candidate's meta.json with the mean of its latest evaluation (None when never evaluated)."""
    from whale.search.archive import Archive

    if not (search / "candidates").is_dir():  # Archive() would create it
        return []
    archive, out = Archive(search), []
    for cid in archive.ids():
        meta, history = archive.meta(cid), archive.eval_history(cid)
        meta["score"] = history[-1].mean if history else None
        meta["weights"] = history[-1].weights_version if history else None
        out.append(meta)
    return out


def run_end(run: RunFiles) -> float:
    """Budget rollouts spent so far."""
    b = run.state.get("budget", {})
    spent = [b.get("train_rollouts", 0) + b.get("search_rollouts", 0)]
    spent += [e["rollouts"] for e in run.events if "rollouts" in e] + [p["rollouts"] for p in run.points]
    return float(max(spent))
