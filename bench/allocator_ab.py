"""glibc's default malloc against one that keeps freed memory (mmap threshold 1 GiB, trim threshold 2 GiB,
set through glibc's environment variables), on the math rollout workload, each side in fresh processes,
alternated. Not adopted by whale: a whole run came out worse (docs/performance.md).

    python bench/allocator_ab.py --out docs/bench/DATE-allocator.json [--rounds 3]

32 math tasks x 8 samples of the seed harness through FastEngine at the default run's concurrency,
in lockstep (so both sides must draw the same tokens), one torch thread. Recorded per process: wall,
user and system CPU seconds, page faults and peak memory, with the tokens, the mean reward and a digest
of every completion, which must not change.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def child(mode: str) -> dict:
    import torch

    from whale.bench.settings import FULL, SEED
    from whale.bench.workload_bench import run_concurrency
    from whale.core.config import Config, DomainConfig
    from whale.domains.registry import build_domain
    from whale.harness.calls import RolloutJob, RunnerLimits
    from whale.harness.records import HarnessCandidate
    from whale.harness.runner import RolloutRunner
    from whale.model.engine import SamplingParams
    from whale.model.fast_engine import FastEngine
    from whale.model.loading import load_model

    kept = "MALLOC_MMAP_THRESHOLD_" in os.environ
    torch.set_num_threads(1)
    model, tokenizer = load_model("embedded", SEED)
    model.eval()
    sizes = {"train": 1, "search": FULL.workload_tasks, "val": 1, "test": 1}
    domain = build_domain(DomainConfig(name="math", seed=SEED, sizes=sizes))
    tasks, harness = domain.splits()["search"], HarnessCandidate("seed", domain.seed_harness())
    workers, max_batch = run_concurrency()
    s = Config().sampling
    # lockstep: the batches follow from the jobs alone, so both sides must draw the very same tokens
    limits = RunnerLimits(workers=workers, max_tokens_cap=FULL.workload_max_tokens, lockstep=True)
    engine = FastEngine(model, tokenizer, max_batch=max_batch)
    runner = RolloutRunner(
        engine, domain, SamplingParams(s.temperature, s.top_p, s.top_k, s.max_tokens), limits, SEED
    )
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    try:
        runner.run([RolloutJob(t, harness, 0, salt="warm-up") for t in tasks])
        rollouts = runner.run([RolloutJob(t, harness, j) for t in tasks for j in range(FULL.workload_k)])
    finally:
        runner.close()
    after = resource.getrusage(resource.RUSAGE_SELF)
    draws = hashlib.sha256(json.dumps([[c.completion_ids for c in r.calls] for r in rollouts]).encode())
    return {
        "mode": mode,
        "kept": kept,
        "wall_s": round(time.perf_counter() - start, 2),
        "user_s": round(after.ru_utime - before.ru_utime, 2),
        "system_s": round(after.ru_stime - before.ru_stime, 2),
        "page_faults": after.ru_minflt - before.ru_minflt,
        "peak_rss_mib": after.ru_maxrss // 1024,
        "load_average_at_start": os.getloadavg()[0],
        "generated_tokens": sum(len(c.completion_ids) for r in rollouts for c in r.calls),
        "mean_reward": sum(r.reward or 0.0 for r in rollouts) / len(rollouts),
        "draws_sha256": draws.hexdigest()[:16],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=["default", "keep"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)), flush=True)
        return
    from whale.core.provenance import SIMD_FLAGS, code_version, cpu_model_and_flags

    cpu, flags = cpu_model_and_flags()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | {"OMP_NUM_THREADS": "1"}
    result = {
        "commit": code_version(),
        "cpu": cpu,
        "flags": [f for f in SIMD_FLAGS if f in flags],
        "cores": os.cpu_count(),
        "runs": [],
    }
    kept = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str((1 << 31) - 1)}
    for round_ in range(args.rounds):
        for mode in ("default", "keep"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", mode],
                env=env | kept if mode == "keep" else env,
                capture_output=True,
                text=True,
                check=True,
            )
            run = json.loads(out.stdout.strip().splitlines()[-1]) | {"round": round_}
            result["runs"].append(run)
            print(json.dumps(run), flush=True)
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
