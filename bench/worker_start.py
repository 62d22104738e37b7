"""What one sandbox worker costs to start, at this checkout and at others, alternated round by round.

    python bench/worker_start.py --out docs/bench/DATE-worker-start.json [--other /path/to/worktree ...] \
        [--starts 20] [--rounds 3]

Each round starts `--starts` workers one after another (the launcher with every OS layer, then the
worker's Python, up to its hello) in a fresh process per checkout, waits for all of them, kills them and
reads the CPU seconds of the reaped children; the checkouts take turns within every round, so a change
of load hits both. A worktree given with --other runs with this checkout's Python and its own code on
PYTHONPATH (its workers then load its launcher and worker), so two commits that pin the same packages
compare like for like.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from statistics import median

from whale.core.provenance import code_version, machine

HERE = Path(__file__).resolve().parents[1]

ONE_ROUND = """
import json, resource, select, sys, time
from whale.harness.calls import RunnerLimits
from whale.harness.worker_process import kill_worker, spawn_worker
limits = RunnerLimits()
def cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
spawn_worker(limits.memory_mb, limits.cpu_s)  # the probe of loaded_files runs once per process: not timed
c0, t0 = cpu(), time.perf_counter()
workers = [spawn_worker(limits.memory_mb, limits.cpu_s) for _ in range(int(sys.argv[1]))]
for w in workers:
    select.select([w.proc.stdout], [], [], 60)
wall = time.perf_counter() - t0
for w in workers:
    kill_worker(w)
print(json.dumps({"wall_s": wall, "cpu_s": cpu() - c0}))
"""


def one_round(checkout: Path, starts: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-c", ONE_ROUND, str(starts)], env=env, cwd="/", text=True,
                          capture_output=True, timeout=600, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--other", type=Path, action="append", default=[], help="another checkout")
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    checkouts = [HERE, *args.other]
    names = [code_version() if c == HERE else subprocess.check_output(
        ["git", "rev-parse", "--short", "HEAD"], cwd=c, text=True).strip() for c in checkouts]  # fmt: skip
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name, checkout in zip(names, checkouts, strict=True):
            rounds[name].append(one_round(checkout, args.starts))
            print(json.dumps({"round": r, "code": name, **rounds[name][-1]}), flush=True)
    per_start = {name: median(x["cpu_s"] for x in rs) / args.starts for name, rs in rounds.items()}
    out = {
        "what": "CPU seconds of sandbox workers started one after another, each checkout in turn",
        "machine": machine(),
        "load_average": os.getloadavg(),
        "starts_per_round": args.starts,
        "rounds": rounds,
        "median_cpu_s_per_start": per_start,
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(per_start))


if __name__ == "__main__":
    main()
