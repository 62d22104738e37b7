"""Engines and dtypes on the rollout workload through whale's runner, beside transformers' generate.

    python bench/engine_dtypes.py --out docs/bench/DATE-engine-dtypes.json [--rounds 2] [--kinds fast,vllm]
        [--dtypes float32,bfloat16]

Each round runs, in turn, every engine kind in float32 and in bfloat16 (one engine built per pair, start-up
timed, closed after) on the math seed harness, 32 tasks x 8 samples (for vLLM also its own `LLM.generate`
with n=8 on the same first prompts, without whale's runner), then transformers' `generate` with
`num_return_sequences=8` on the same first-call prompts in both dtypes. Pairs alternate within a round so
drift in the machine's load falls on all of them. The mean reward is kept beside the speed, and the CPU
flags are recorded: bfloat16 is only fast where AVX512_BF16 or AMX exist.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch

from whale.bench.machine import machine_facts
from whale.bench.settings import FULL, SEED
from whale.bench.workload_bench import run_concurrency, run_engine, run_generate, run_vllm_alone
from whale.core.config import DomainConfig, EngineConfig
from whale.core.provenance import code_version
from whale.domains.registry import build_domain
from whale.model.backends import build_engine
from whale.model.loading import load_model

DTYPES = ("float32", "bfloat16")


def engine_config(kind: str, dtype: str) -> EngineConfig:
    return (
        EngineConfig(kind=kind, vllm={"dtype": dtype})
        if kind == "vllm"
        else EngineConfig(kind=kind, dtype=dtype)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kinds", default="fast,vllm")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="float32 alone where bf16 is slow (AVX2)")
    args = parser.parse_args()
    dtypes = args.dtypes.split(",")
    model, tokenizer = load_model("embedded", SEED)
    model.eval()
    models = {"float32": model}
    if "bfloat16" in dtypes:
        models["bfloat16"] = copy.deepcopy(model).to(torch.bfloat16)
    sizes = {"train": 1, "search": FULL.workload_tasks, "val": 1, "test": 1}
    domain = build_domain(DomainConfig(name="math", seed=SEED, sizes=sizes))
    tasks = domain.splits()["search"]
    workers, max_batch = run_concurrency()
    result = {"commit": code_version(), "machine": machine_facts(model), "runs": [], "generate": []}
    result["vllm_alone"] = []

    def save(record: dict) -> None:
        print(json.dumps({k: v for k, v in record.items() if k != "first_prompts"}), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")

    for round_ in range(args.rounds):
        prompts = None
        for kind in args.kinds.split(","):
            for dtype in dtypes:
                start = time.perf_counter()
                engine = build_engine(engine_config(kind, dtype), model, tokenizer, max_batch)
                startup = time.perf_counter() - start
                try:
                    run = run_engine(engine, domain, tasks, FULL, workers)
                    if kind == "vllm":
                        alone = run_vllm_alone(engine, run["first_prompts"], FULL)
                        alone.update(dtype=dtype, round=round_)
                        result["vllm_alone"].append(alone)
                        save(alone)
                finally:
                    if hasattr(engine, "close"):
                        engine.close()
                prompts = prompts or run["first_prompts"]
                run.pop("first_prompts")
                run.update(kind=kind, dtype=dtype, round=round_, startup_s=startup)
                result["runs"].append(run)
                save(run)
        for dtype, m in models.items():
            baseline = run_generate(m, tokenizer, prompts, FULL)
            baseline.update(dtype=dtype, round=round_)
            result["generate"].append(baseline)
            save(baseline)


if __name__ == "__main__":
    main()
