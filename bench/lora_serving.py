"""LoRA on vLLM's CPU build, served two ways through whale's runner (issue 30): as an adapter (hot swap,
`engine.vllm.lora_serving=adapter`) and merged into full weights (`merged`, the CPU default). The same
engine, the same trained-like adapter (rank 16, perturbed so its delta is not zero), TASKS math tasks x K
samples of the seed harness at the default sampling; each way after its own weight sync, whose time is
measured too. Prints one RESULT line of JSON; docs/performance.md has the numbers.

    python bench/lora_serving.py"""

import json
import os
import time

import torch


def main() -> None:
    from whale.bench.machine import machine_facts
    from whale.core.config import Config, EngineConfig
    from whale.core.provenance import code_version
    from whale.domains.math import MathDomain
    from whale.harness.calls import RolloutJob, RunnerLimits
    from whale.harness.records import HarnessCandidate
    from whale.harness.runner import RolloutRunner
    from whale.model.backends import build_engine
    from whale.model.engine import SamplingParams
    from whale.model.loading import load_model
    from whale.model.trainer import TrainerConfig, with_lora

    n_tasks, k = int(os.environ.get("TASKS", "32")), int(os.environ.get("K", "8"))
    base = Config()
    model, tok = load_model("embedded", 0)
    model = with_lora(model, TrainerConfig(lora_r=16, lora_alpha=32))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn(p.shape, generator=gen) * 0.002)  # a small step's worth of change
    model.eval()
    t0 = time.perf_counter()
    engine = build_engine(EngineConfig(kind="vllm"), model, tok, 256)
    out = {"commit": code_version(), "startup_s": time.perf_counter() - t0, "tasks": n_tasks, "k": k}
    out["cpu_flags"] = machine_facts(model).get("cpu_flags")
    domain = MathDomain(seed=0, sizes={"train": 1, "search": n_tasks, "val": 1, "test": 1})
    s = base.sampling
    sampling = SamplingParams(s.temperature, s.top_p, s.top_k, s.max_tokens)
    harness = HarnessCandidate("seed", domain.seed_harness())
    runner = RolloutRunner(engine, domain, sampling, RunnerLimits(workers=32), seed=0)
    try:
        for i, way in enumerate(("adapter", "merged", "adapter", "merged")):
            engine.merge = way == "merged"
            engine.weights_version = f"w-{way}-{i}"
            t1 = time.perf_counter()
            engine.sync_weights()
            sync_s = time.perf_counter() - t1
            before = engine.tokens_generated
            jobs = [
                RolloutJob(t, harness, j, salt=f"{way}{i}")
                for t in domain.splits()["search"]
                for j in range(k)
            ]
            t2 = time.perf_counter()
            rollouts = runner.run(jobs)
            wall = time.perf_counter() - t2
            tokens = engine.tokens_generated - before
            row = {"sync_s": sync_s, "wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall,
                   "failed": sum(r.error is not None for r in rollouts),
                   "mean_reward": sum(r.reward for r in rollouts) / len(rollouts)}  # fmt: skip
            out[f"{way}{i}"] = row
            print(way, json.dumps(row), flush=True)
    finally:
        runner.close()
        engine.close()
    out["loadavg_end"] = os.getloadavg()
    print("RESULT", json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
