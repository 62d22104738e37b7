"""Where FastEngine's decode step goes at a full batch, beside what the CPU's matmuls can do.

    python bench/decode_profile.py --out docs/bench/DATE-decode-profile.json [--rows 128] [--steps 20] \
        [--threads 1] [--dtypes float32,bfloat16]

Per dtype: the math seed prompt's 16 tasks x 8 samples (so `--rows` live rows) are admitted, then
`--steps` decode steps run under torch's profiler. Reported: the step's wall and tokens/s, each op's
share of the CPU time, and the GFLOP/s the matmuls reached (rows x the model's matmul FLOPs per token,
lm_head included, over the time in aten::mm) against the best-of-N GFLOP/s of the model's own matmul
shapes at the same rows, dtype and threads (`whale.bench.machine.best_matmul`). Attention over the
context runs in scaled_dot_product_attention and is not counted as matmul FLOPs.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from whale.bench.machine import best_matmul, model_flops
from whale.core.provenance import code_version, machine
from whale.domains.math import MathDomain
from whale.model.engine import GenerationRequest, SamplingParams
from whale.model.fast_engine import FastEngine
from whale.model.loading import load_model

SYSTEM = "You are a helpful assistant. Solve the math problem."


def requests(rows: int) -> list[GenerationRequest]:
    tasks = MathDomain().splits()["train"][: max(1, rows // 8)]
    return [
        GenerationRequest(
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"{t.inputs['question']}"}],
            SamplingParams(temperature=0.7, max_tokens=48),
            seed=1000 * sample + i,
        )
        for i, t in enumerate(tasks)
        for sample in range(8)
    ][:rows]


def profile_dtype(model: Any, tokenizer: Any, dtype: torch.dtype, rows: int, steps: int) -> dict[str, Any]:
    engine = FastEngine(model, tokenizer, max_batch=rows, dtype=dtype)
    for i, request in enumerate(requests(rows)):
        engine.submit(request, i)
    engine.step()  # admission
    engine.step()
    live, before, start = len(engine._rows), engine.tokens_generated, time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            engine.step()
    wall = time.perf_counter() - start
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total_us = sum(e.self_cpu_time_total for e in ops)
    mm_s = sum(e.self_cpu_time_total for e in ops if e.key == "aten::mm") / 1e6
    tokens = engine.tokens_generated - before
    flops = model_flops(model)["flops_per_token"] * tokens
    cfg = model.config
    d, ff, vocab = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    shapes = {"mlp_up": (d, 2 * ff), "mlp_down": (ff, d), "attn_proj": (d, d), "lm_head": (d, vocab)}
    best = {name: best_matmul(live, k, n, dtype, 0.2, 5)["gflops"] for name, (k, n) in shapes.items()}
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "rows": live,
        "steps": steps,
        "step_s": wall / steps,
        "tokens_per_s": tokens / wall,
        "op_share": {e.key: e.self_cpu_time_total / total_us for e in ops[:10]},
        "mm_s": mm_s,
        "mm_gflops": flops / mm_s / 1e9,
        "best_matmul_gflops": best,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model("embedded")
    runs = []
    for name in args.dtypes.split(","):
        runs.append(profile_dtype(model, tokenizer, getattr(torch, name), args.rows, args.steps))
        top = {k: round(v, 3) for k, v in list(runs[-1]["op_share"].items())[:4]}
        print(json.dumps({k: runs[-1][k] for k in ("dtype", "rows", "tokens_per_s", "mm_gflops")} | top))
    out = {"what": __doc__.splitlines()[0], "commit": code_version(), "machine": machine(),
           "threads": args.threads, "load_average": list(os.getloadavg()), "runs": runs}  # fmt: skip
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
