"""End to end against an older commit: `whale run --preset default` at the commit in another worktree and
at this checkout, seed by seed, one process at a time, each timed from launch to exit.

    python bench/before_after.py --before /work/before --out docs/bench/DATE-before-after.json \
        --runs DIR [--seeds 0,1] [--kinds fast,vllm] [--preset default] [--set key=value ...]

The other worktree runs with its own `.venv` (make install there): an older commit may pin other
packages. Each seed runs the older commit first, then each engine kind of this checkout. Reports each
run's wall and test mean@k, the older commit's wall over each kind's per seed (the speed-up), and each
kind's test mean@k minus the older commit's, paired over seeds then tasks at the validation-selected
and the last point (`whale.studies.compare`), so a faster run that learned less shows. Run folders are
kept under --runs and a finished one is not run again (its recorded wall is reused), so the rollouts
behind every number stay readable with `whale view`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from whale.bench.end_to_end import one_run
from whale.core.provenance import code_version, machine
from whale.studies.compare import load_run_data, paired_seeds, verdict

BEFORE = "before"


def run_or_reuse(label: str, folder: Path, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    record = folder.parent / f"{folder.name}.json"
    if record.exists():
        return json.loads(record.read_text())
    run = make()
    record.write_text(json.dumps(run, indent=1) + "\n")
    print(json.dumps({"run": label, "wall_s": run["wall_s"], "test": run["test"]}), flush=True)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="worktree of the older commit, with .venv")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--kinds", default="fast", help="engine kinds of this checkout, KIND[:DTYPE]")
    parser.add_argument("--preset", default="default")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    before_python = str(args.before / ".venv" / "bin" / "python")
    git = ["git", "rev-parse", "--short", "HEAD"]
    before_commit = subprocess.check_output(git, cwd=args.before, text=True).strip()
    args.runs.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for seed in seeds:
        sets = [f"seed={seed}", *args.sets]
        folder = args.runs / f"{BEFORE}-seed{seed}"
        before = partial(one_run, "fast", args.preset, sets, folder, python=before_python, root=args.before)
        made = run_or_reuse(f"{BEFORE} seed {seed}", folder, before)
        runs.append({"variant": BEFORE, "seed": seed, "folder": str(folder), **made})
        for kind in kinds:
            folder = args.runs / f"{kind.replace(':', '-')}-seed{seed}"
            after = partial(one_run, kind, args.preset, sets, folder)
            made = run_or_reuse(f"{kind} seed {seed}", folder, after)
            runs.append({"variant": kind, "seed": seed, "folder": str(folder), **made})
    walls = {(r["variant"], r["seed"]): r["wall_s"] for r in runs}
    folders = {v: [Path(r["folder"]) for r in runs if r["variant"] == v] for v in [BEFORE, *kinds]}
    data = {v: [load_run_data(f, v) for f in fs] for v, fs in folders.items()}
    against = {}
    for kind in kinds:
        speedups = [walls[BEFORE, s] / walls[kind, s] for s in seeds]
        tests = {}
        for pick in ("selected", "last"):
            diff = paired_seeds(data[kind], data[BEFORE], pick=pick)
            tests[pick] = {**asdict(diff), "verdict": verdict(diff)}
        against[kind] = {"speedup_per_seed": [round(x, 3) for x in speedups], "test_minus_before": tests}
    result = {
        "what": f"whale run --preset {args.preset}, end to end, this checkout against an older commit",
        "commit": code_version(),
        "before_commit": before_commit,
        "machine": machine(),
        "overrides": args.sets,
        "runs": runs,
        "against_before": against,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for kind, a in against.items():
        print(f"{kind}: speed-up over {before_commit} per seed {a['speedup_per_seed']}")
        for pick, d in a["test_minus_before"].items():
            interval = f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
            print(f"  test at {pick}, {kind} - before: {d['mean_diff']:+.3f} {interval}: {d['verdict']}")


if __name__ == "__main__":
    main()
