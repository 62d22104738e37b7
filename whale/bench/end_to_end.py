"""End to end, engine against engine: `whale run` with each `engine.kind`, alternated, start-up included.

    python -m whale.bench.end_to_end --out docs/bench/DATE-end-to-end.json [--kinds fast,vllm:bfloat16]
        [--pairs 1] [--preset default] [--set key=value ...]

    whale bench --end-to-end fast,vllm [--out DIR]      # the same, into DIR/end-to-end.json

A kind may carry a dtype, `KIND:DTYPE`: the engine serves in it and the trainer computes in it
(`engine.dtype` or `engine.vllm.dtype`, and `weights.dtype`), so a machine with AVX512_BF16 or AMX can be
measured in bfloat16 end to end.

Each run is a fresh `python -m whale.cli run` process timed from launch to exit. Its events and
evaluation points carry the run's wall clock and its time per part (whale.core.timing), so the wall
splits into weight steps, search iterations and evaluations, each with its budget rollouts per second and
its engine, trainer, weight-sync and sandbox time, and start-up. The test mean@k of the runs is kept
beside the times: a faster engine must not change the result.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whale.bench.machine import machine_facts
from whale.core.provenance import code_version

ROOT = Path(__file__).resolve().parents[2]

UNITS = {"weight steps": "train_rollouts", "search iterations": "search_rollouts", "evaluations": None}
PARTS = ("engine", "trainer", "weight sync")  # measured inside the run (whale.core.timing)
DTYPES = ("float32", "bfloat16")


def last_record(run: Path) -> dict[str, Any]:
    """The run's last timestamped record (events and evaluation points): its time per unit and part."""
    rows = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line]
    rows += [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines() if line]
    stamped = [r for r in rows if "parts_s" in r]
    return max(stamped, key=lambda r: (r["wall_s"], sum(p.get("wall", 0.0) for p in r["parts_s"].values())))


def split_wall(run: Path, wall: float) -> dict[str, Any]:
    """Wall seconds, budget rollouts per second and the time in each part, per kind of unit;
    "sandbox and tools" is rollout time outside the engine and weight syncs, "other" the unit's time
    outside every part (proposing, bookkeeping). "between units" is the run's clock outside every unit
    (checkpoints, the schedule); "start-up and shutdown" the rest of the process's wall (imports, loading
    the model, building the engine)."""
    last = last_record(run)
    budget = json.loads((run / "state.json").read_text())["budget"]
    split: dict[str, dict[str, Any]] = {}
    for label, spent in UNITS.items():
        p = last["parts_s"].get(label, {})
        entry = {"wall_s": p.get("wall", 0.0), "rollouts": budget[spent] if spent else 0}
        entry.update({k: p.get(k, 0.0) for k in PARTS})
        entry["workers started"] = int(p.get("workers started", 0))
        # vLLM's weight sync runs when the first request of new weights is submitted, inside rollouts
        entry["sandbox and tools"] = p.get("rollouts", 0.0) - p.get("engine", 0.0) - p.get("weight sync", 0.0)
        entry["other"] = entry["wall_s"] - sum(entry[k] for k in (*PARTS, "sandbox and tools"))
        rate = entry["rollouts"] / entry["wall_s"] if entry["wall_s"] and entry["rollouts"] else None
        entry["rollouts_per_s"] = rate
        split[label] = entry
    split["between units"] = {"wall_s": last["wall_s"] - sum(e["wall_s"] for e in split.values())}
    split["start-up and shutdown"] = {"wall_s": wall - last["wall_s"]}
    return split


def parse_variants(text: str) -> list[str]:
    """'fast, vllm:bfloat16' -> ['fast', 'vllm:bfloat16']; an unknown kind or dtype is a ConfigError."""
    from typing import get_args

    from whale.core.config import ConfigError, EngineConfig

    known = [k for k in get_args(EngineConfig.model_fields["kind"].annotation) if k != "remote"]
    variants = [v.strip() for v in text.split(",") if v.strip()]
    for kind, _, dtype in (v.partition(":") for v in variants):
        if kind not in known:
            raise ConfigError(f"--end-to-end: unknown engine kind {kind!r} ({', '.join(known)})")
        if dtype and dtype not in DTYPES:
            raise ConfigError(f"--end-to-end: unknown dtype {dtype!r} after {kind} ({', '.join(DTYPES)})")
    return variants


def variant_sets(variant: str) -> list[str]:
    """`fast` -> engine.kind=fast; `vllm:bfloat16` -> vLLM serving and the trainer computing in bfloat16."""
    kind, _, dtype = variant.partition(":")
    if not dtype:
        return [f"engine.kind={kind}"]
    engine_dtype = "engine.vllm.dtype" if kind == "vllm" else "engine.dtype"
    return [f"engine.kind={kind}", f"{engine_dtype}={dtype}", f"weights.dtype={dtype}"]


def one_run(
    kind: str,
    preset: str,
    sets: list[str],
    out: Path,
    python: str = sys.executable,
    root: Path = ROOT,
    cores: frozenset[int] | None = None,
) -> dict[str, Any]:
    """One `whale run` of the checkout at `root` with its interpreter `python` (another worktree's, to time
    an older commit), pinned to `cores` if given; a run from before whale.core.timing has no parts, and
    one from before the start event said its compute has none. `cores` in the record is the set the run
    could use, pinned here or inherited (a bench started under taskset)."""
    command = [python, "-m", "whale.cli", "run", "--preset", preset, "--out", str(out)]
    command += [a for s in (*variant_sets(kind), *sets) for a in ("--set", s)]
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    start = time.monotonic()
    proc = subprocess.run(command, cwd=root, capture_output=True, text=True, preexec_fn=pin)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{kind}: whale run failed:\n{proc.stderr[-2000:]}")
    points = [json.loads(line) for line in (out / "evals.jsonl").read_text().splitlines()]
    start_event = json.loads((out / "events.jsonl").read_text().splitlines()[0])
    timed = any("parts_s" in p for p in points)
    return {
        "kind": kind,
        "cores": sorted(cores or os.sched_getaffinity(0)),
        "wall_s": round(wall, 1),
        "compute": start_event.get("compute"),
        "parts": split_wall(out, wall) if timed else None,
        "test": [(p["rollouts"], p["test"]["mean"]) for p in points],
        "budget_rollouts": points[-1]["rollouts"],
    }


def bench_end_to_end(
    kinds: list[str],
    out: Path,
    preset: str = "default",
    sets: tuple[str, ...] = (),
    pairs: int = 1,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every kind `pairs` times, alternated; `out` is rewritten after each run, so a stopped bench keeps
    what it measured."""
    import torch

    machine = machine_facts(torch.nn.Linear(1, 1))  # each run loads its own model; this is the machine
    result: dict[str, Any] = {"commit": code_version(), "preset": preset, "sets": list(sets), **machine}
    result["runs"] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(pairs):
            for kind in kinds:
                log(f"end to end: whale run --preset {preset} with engine.kind={kind} (round {round_ + 1})")
                run = one_run(kind, preset, list(sets), Path(tmp) / f"{kind.replace(':', '-')}-{round_}")
                result["runs"].append(run)
                log(json.dumps({k: run[k] for k in ("kind", "wall_s", "test")}))
                out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file for every number")
    parser.add_argument("--kinds", default="fast,vllm", help="KIND[:DTYPE] values, alternated")
    parser.add_argument("--pairs", type=int, default=1, help="rounds of all kinds")
    parser.add_argument("--preset", default="default")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="override for every run")
    args = parser.parse_args()
    bench_end_to_end(args.kinds.split(","), args.out, args.preset, tuple(args.sets), args.pairs)


if __name__ == "__main__":
    main()
