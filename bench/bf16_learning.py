"""What bfloat16 does to what a run learns: `whale run --preset default` in float32 and in bfloat16 (the
fast engine and the trainer), each seed's two runs in lockstep so that they differ by the dtype alone,
`--jobs` at a time.

    python bench/bf16_learning.py --out docs/bench/DATE-bf16-learning.json --runs DIR [--seeds 0,1,2]
        [--jobs 2] [--preset default] [--set key=value ...]

Reports each run's test mean@8 at the start, at the validation-selected point and at the end, and the
paired difference bfloat16 minus float32 over seeds then tasks (`whale.core.hierarchical`, as `whale
compare` reports methods) at the selected and at the last point. A finished run folder is reused, an
unfinished one resumed. Each run gets its share of the cores (OMP_NUM_THREADS), so wall times are not
comparable with a run alone; lockstep makes the draws independent of them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from whale.bench.end_to_end import variant_sets
from whale.core.provenance import code_version, machine
from whale.run.summary import best_val_point
from whale.studies.compare import load_run_data, paired_seeds, verdict

DTYPES = ("float32", "bfloat16")


def run_one(folder: Path, preset: str, seed: int, dtype: str, sets: list[str], threads: int) -> None:
    state = folder / "state.json"
    resume = state.exists()
    if resume and json.loads(state.read_text()).get("finished"):
        return
    command = [sys.executable, "-m", "whale.cli", "run"]
    command += ["--resume", str(folder)] if resume else ["--preset", preset, "--out", str(folder)]
    overrides = [f"seed={seed}", "runner.lockstep=true", *variant_sets(f"fast:{dtype}"), *sets]
    if not resume:
        command += [a for s in overrides for a in ("--set", s)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    with open(folder.parent / f"{folder.name}.log", "a") as log:
        subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)


def point_scores(points: list[dict[str, Any]]) -> dict[str, float]:
    selected = best_val_point(points)
    return {
        "start": points[0]["test"]["mean"],
        "selected": selected["test"]["mean"],
        "selected_point": selected["point"],
        "last": points[-1]["test"]["mean"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--preset", default="default")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    args.runs.mkdir(parents=True, exist_ok=True)
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    plan = [(args.runs / f"{dtype}-seed{seed}", seed, dtype) for seed in seeds for dtype in DTYPES]
    with ThreadPoolExecutor(args.jobs) as pool:
        for done in [pool.submit(run_one, f, args.preset, s, d, args.sets, threads) for f, s, d in plan]:
            done.result()
    data = {dtype: [load_run_data(f, dtype) for f, _, d in plan if d == dtype] for dtype in DTYPES}
    runs = [
        {"dtype": d.method, "seed": d.seed, "commits": d.commits, "wall_s": d.budget.get("wall_s"),
         **point_scores(d.points)}
        for dtype in DTYPES for d in data[dtype]
    ]  # fmt: skip
    differences = {}
    for pick in ("selected", "last"):
        diff = paired_seeds(data["bfloat16"], data["float32"], pick=pick)
        differences[pick] = {**asdict(diff), "verdict": verdict(diff)}
    result = {
        "what": f"bfloat16 minus float32, whale run --preset {args.preset} in lockstep, test mean@k",
        "commit": code_version(),
        "machine": machine(),
        "overrides": args.sets,
        "runs": runs,
        "differences": differences,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for r in runs:
        print(f"{r['dtype']:9s} seed {r['seed']}: test {r['start']:.3f} -> selected {r['selected']:.3f} "
              f"(point {r['selected_point']}), last {r['last']:.3f}")  # fmt: skip
    for pick, d in differences.items():
        interval = f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
        print(f"bfloat16 - float32 at {pick}: {d['mean_diff']:+.3f} {interval} p={d['p']}: {d['verdict']}")


if __name__ == "__main__":
    main()
