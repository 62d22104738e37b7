"""What `runner.lockstep` buys and costs: same-seed reruns of the rollout workload, float32 and bfloat16.

    python bench/lockstep.py --out docs/bench/DATE-lockstep.json [--rounds 2] [--domains math,searchqa]

Each round runs every domain's seed harness on 32 tasks x 8 samples through whale's runner and a fresh
FastEngine, in float32 and bfloat16, with lockstep off and on (alternated, so the machine's drift falls on
all). Rounds repeat the same seeds: a setting reproduces when every rollout's completions equal the first
round's. Wall time says what waiting for every harness before each decode step costs.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from whale.bench.machine import machine_facts
from whale.bench.settings import FULL, SEED
from whale.core.config import Config, DomainConfig
from whale.core.provenance import code_version
from whale.domains.registry import build_domain
from whale.harness.calls import RolloutJob, RunnerLimits
from whale.harness.records import HarnessCandidate
from whale.harness.runner import RolloutRunner
from whale.model.engine import SamplingParams
from whale.model.fast_engine import FastEngine
from whale.model.loading import load_model


def workload(model: Any, tokenizer: Any, domain: Any, dtype: torch.dtype, lockstep: bool) -> dict[str, Any]:
    s = Config().sampling
    limits = RunnerLimits(
        workers=FULL.rollout_workers, max_tokens_cap=FULL.workload_max_tokens, lockstep=lockstep
    )
    engine = FastEngine(model, tokenizer, dtype=dtype)
    runner = RolloutRunner(
        engine, domain, SamplingParams(s.temperature, s.top_p, s.top_k, s.max_tokens), limits, SEED
    )
    harness = HarnessCandidate("seed", domain.seed_harness())
    tasks = domain.splits()["search"]
    try:
        start = time.perf_counter()
        rollouts = runner.run([RolloutJob(t, harness, j) for t in tasks for j in range(FULL.workload_k)])
        wall = time.perf_counter() - start
    finally:
        runner.close()
    return {
        "wall_s": wall,
        "rollouts": len(rollouts),
        "failed": sum(r.error is not None for r in rollouts),
        "solved": sum((r.reward or 0.0) > 0 for r in rollouts),
        "tokens": engine.tokens_generated,
        "completions": [[c.completion_ids for c in r.calls] for r in rollouts],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--domains", default="math,searchqa")
    args = parser.parse_args()
    model, tokenizer = load_model("embedded", SEED)
    model.eval()
    sizes = {"train": 1, "search": FULL.workload_tasks, "val": 1, "test": 1}
    result: dict[str, Any] = {"commit": code_version(), "machine": machine_facts(model), "runs": []}
    first: dict[tuple, list] = {}
    for round_ in range(args.rounds):
        for name in args.domains.split(","):
            domain = build_domain(DomainConfig(name=name, seed=SEED, sizes=sizes))
            for dtype in (torch.float32, torch.bfloat16):
                for lockstep in (False, True):
                    run = workload(model, tokenizer, domain, dtype, lockstep)
                    key = (name, str(dtype), lockstep)
                    completions = run.pop("completions")
                    reference = first.setdefault(key, completions)
                    run["same_as_round_0"] = sum(a == b for a, b in zip(reference, completions, strict=True))
                    run.update(
                        round=round_, domain=name, dtype=str(dtype).removeprefix("torch."), lockstep=lockstep
                    )
                    result["runs"].append(run)
                    print(json.dumps(run), flush=True)
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
