"""vLLM on the CPU in float32 against bfloat16, on the rollout workload through whale's runner.

    python bench/vllm_dtype.py --out docs/bench/DATE-vllm-dtype.json [--rounds 2]

Each round builds one engine per dtype (start-up timed), runs the math seed harness on 32 tasks x 8
samples (warm workers, default sampling) and closes it; dtypes alternate so drift in the machine's load
falls on both. The mean reward is kept beside the speed: a faster dtype must not change what is sampled
by more than noise. The CPU flags (AVX512_BF16, AMX) are recorded: bf16 is only fast where they exist.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from whale.bench.machine import machine_facts
from whale.bench.settings import FULL, SEED
from whale.bench.workload_bench import run_engine
from whale.core.config import DomainConfig, EngineConfig
from whale.core.provenance import code_version
from whale.domains.registry import build_domain
from whale.model.backends import build_engine
from whale.model.loading import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    model, tokenizer = load_model("embedded", SEED)
    model.eval()
    sizes = {"train": 1, "search": FULL.workload_tasks, "val": 1, "test": 1}
    domain = build_domain(DomainConfig(name="math", seed=SEED, sizes=sizes))
    tasks = domain.splits()["search"]
    result = {"commit": code_version(), "machine": machine_facts(model), "runs": []}
    for round_ in range(args.rounds):
        for dtype in ("float32", "bfloat16"):
            start = time.perf_counter()
            engine = build_engine(EngineConfig(kind="vllm", vllm={"dtype": dtype}), model, tokenizer, 256)
            startup = time.perf_counter() - start
            try:
                run = run_engine(engine, domain, tasks, FULL)
            finally:
                engine.close()
            run.pop("first_prompts")
            run.update(dtype=dtype, round=round_, startup_s=startup)
            result["runs"].append(run)
            print(
                json.dumps({k: run[k] for k in ("dtype", "wall_s", "tokens_per_s", "mean_reward")}),
                flush=True,
            )
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
