"""Where vLLM's engine core runs, in lockstep: its own process (vLLM's default) or whale's (`inline`).

    python bench/vllm_core.py --out docs/bench/DATE-vllm-core.json [--processes 3] [--rounds 3]

Each process (alternating the two settings, so the machine's drift falls on both) starts one vLLM engine
in bfloat16 and runs the math seed harness on 16 tasks x 8 samples through whale's runner in lockstep,
`--rounds` times with the same seeds and the prefix cache emptied in between. A setting repeats when every
rollout's completions equal its first round's; round 0 also warms the engine, so walls compare from round 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from whale.bench.machine import machine_facts
from whale.bench.settings import FULL, SEED
from whale.core.config import Config, DomainConfig, EngineConfig, VLLMConfig
from whale.core.provenance import code_version
from whale.domains.registry import build_domain
from whale.harness.calls import RolloutJob, RunnerLimits
from whale.harness.records import HarnessCandidate
from whale.harness.runner import RolloutRunner
from whale.model.backends import build_engine
from whale.model.engine import SamplingParams
from whale.model.loading import load_model

TASKS, SAMPLES = 16, 8


def rounds_of(core: str, rounds: int) -> list[dict[str, Any]]:
    """One engine with its core `core`, `rounds` identical runs of the workload through the runner."""
    model, tokenizer = load_model("embedded", SEED)
    model.eval()
    vllm = VLLMConfig(dtype="bfloat16", engine_core=core, cpu_kvcache_gib=1, max_model_len=4096)
    engine = build_engine(EngineConfig(kind="vllm", vllm=vllm), model, tokenizer, FULL.workload_tasks * 8)
    domain = build_domain(DomainConfig(name="math", seed=SEED))
    s = Config().sampling
    sampling = SamplingParams(s.temperature, s.top_p, s.top_k, s.max_tokens)
    harness = HarnessCandidate("seed", domain.seed_harness())
    jobs = [RolloutJob(t, harness, j) for t in domain.splits()["search"][:TASKS] for j in range(SAMPLES)]
    limits = RunnerLimits(FULL.rollout_workers, max_tokens_cap=FULL.workload_max_tokens, lockstep=True)
    out, first = [], None
    try:
        for round_ in range(rounds):
            engine.llm.reset_prefix_cache()
            runner = RolloutRunner(engine, domain, sampling, limits, SEED)
            start = time.perf_counter()
            try:
                rollouts = runner.run(jobs)
            finally:
                runner.close()
            wall = time.perf_counter() - start
            completions = [[c.completion_ids for c in r.calls] for r in rollouts]
            first = first or completions
            same = sum(a == b for a, b in zip(first, completions, strict=True))
            tokens = sum(len(c) for r in completions for c in r)
            out.append({"core": core, "round": round_, "wall_s": round(wall, 2), "same_as_round_0": same,
                        "rollouts": len(jobs), "tokens": tokens})  # fmt: skip
            print(json.dumps(out[-1]), flush=True)
    finally:
        engine.close()
    return out


def in_a_fresh_process(core: str, rounds: int) -> list[dict[str, Any]]:
    """`rounds_of` in a new interpreter (this script with --one), its records read from its output."""
    command = [sys.executable, __file__, "--one", core, "--rounds", str(rounds), "--out", os.devnull]
    proc = subprocess.run(command, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--processes", type=int, default=3, help="processes per setting, alternated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one", choices=("process", "inline"), help="run one setting here and print it")
    args = parser.parse_args()
    if args.one:
        rounds_of(args.one, args.rounds)
        return
    model, _ = load_model("embedded", SEED)
    result: dict[str, Any] = {"commit": code_version(), "machine": machine_facts(model), "runs": []}
    for process in range(args.processes):
        for core in ("process", "inline"):
            for run in in_a_fresh_process(core, args.rounds):
                result["runs"].append({"process": process, **run})
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
