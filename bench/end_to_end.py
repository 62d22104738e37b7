"""End to end, engine against engine: `whale run` with each `engine.kind`, alternated, start-up included.

    python bench/end_to_end.py --out docs/bench/DATE-end-to-end.json [--kinds fast,vllm] [--pairs 1]
        [--preset default] [--set key=value ...]

Each run is a fresh `python -m whale.cli run` process timed from launch to exit. Its events and
evaluation points carry the run's wall clock, so the wall splits into start-up (launch to the first
record), weight steps, search iterations and evaluations, each with its budget rollouts per second. The
test mean@k of the runs is kept beside the times: a faster engine must not change the result.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from whale.bench.machine import machine_facts  # noqa: E402
from whale.core.provenance import code_version  # noqa: E402

KINDS = {"weight_step": "weight steps", "search_iteration": "search iterations", "eval": "evaluations"}


def records(run: Path) -> list[dict[str, Any]]:
    """The run's timestamped records (events and evaluation points) in wall-clock order."""
    rows = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line]
    rows += [{"event": "eval", **json.loads(line)} for line in (run / "evals.jsonl").read_text().splitlines()]
    return sorted((r for r in rows if r.get("wall_s") is not None), key=lambda r: r["wall_s"])


def split_wall(run: Path, wall: float) -> dict[str, Any]:
    """Wall seconds and budget rollouts per kind of unit; start-up is the time before the first record."""
    rows = records(run)
    parts: dict[str, dict[str, float]] = {v: {"wall_s": 0.0, "rollouts": 0.0} for v in KINDS.values()}
    before, spent = 0.0, 0
    run_wall = rows[-1]["wall_s"]
    for r in rows:
        part = parts.get(KINDS.get(r["event"], ""))
        if part is not None:
            part["wall_s"] += r["wall_s"] - before
            if r["event"] != "eval":
                part["rollouts"] += r["rollouts"] - spent
        before = r["wall_s"]
        spent = r.get("rollouts", spent) if r["event"] != "eval" else spent
    for part in parts.values():
        part["rollouts_per_s"] = (
            part["rollouts"] / part["wall_s"] if part["wall_s"] and part["rollouts"] else None
        )
    parts["start-up and the rest"] = {"wall_s": wall - run_wall}
    return parts


def one_run(kind: str, preset: str, sets: list[str], out: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "whale.cli", "run", "--preset", preset, "--out", str(out)]
    command += ["--set", f"engine.kind={kind}", *(a for s in sets for a in ("--set", s))]
    start = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{kind}: whale run failed:\n{proc.stderr[-2000:]}")
    points = [json.loads(line) for line in (out / "evals.jsonl").read_text().splitlines()]
    start_event = json.loads((out / "events.jsonl").read_text().splitlines()[0])
    return {
        "kind": kind,
        "wall_s": round(wall, 1),
        "compute": start_event["compute"],
        "parts": split_wall(out, wall),
        "test": [(p["rollouts"], p["test"]["mean"]) for p in points],
        "budget_rollouts": points[-1]["rollouts"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file for every number")
    parser.add_argument("--kinds", default="fast,vllm", help="engine.kind values, alternated")
    parser.add_argument("--pairs", type=int, default=1, help="rounds of all kinds")
    parser.add_argument("--preset", default="default")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="override for every run")
    args = parser.parse_args()
    machine = machine_facts(torch.nn.Linear(1, 1))  # each run loads its own model; this is the machine
    result: dict[str, Any] = {"commit": code_version(), "preset": args.preset, "sets": args.sets, **machine}
    result["runs"] = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.pairs):
            for kind in args.kinds.split(","):
                run = one_run(kind, args.preset, args.sets, Path(tmp) / f"{kind}-{round_}")
                result["runs"].append(run)
                print(json.dumps({k: run[k] for k in ("kind", "wall_s", "test")}), flush=True)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(result, indent=1) + "\n")
    walls = {k: [r["wall_s"] for r in result["runs"] if r["kind"] == k] for k in args.kinds.split(",")}
    print(json.dumps({"wall_s": walls}))


if __name__ == "__main__":
    main()
