"""`dtype: auto`: time the model's own matmul shapes in fp32 and bf16 and take bf16 only where it is
clearly faster and numerically close (docs/performance.md)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from whale.model.fast_engine import FastEngine
from whale.model.packed_weights import base_model


def _linear_seconds(m: int, k: int, n: int, dtype: torch.dtype, reps: int = 8) -> float:
    import time

    x, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
    F.linear(x, w)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        F.linear(x, w)
        best = min(best, time.perf_counter() - start)
    return best


@torch.no_grad()
def bf16_numerics(model: Any, tokenizer: Any) -> dict[str, float | bool]:
    """Next-token log-probs of one probe prompt in bf16 against fp32: top-1 agreement and the largest
    log-prob difference over fp32's ten likeliest tokens."""
    messages = [{"role": "user", "content": "Name three prime numbers and add them up."}]
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        engine = FastEngine(model, tokenizer, max_batch=1, dtype=dtype, prefix_cache_tokens=0)
        out[dtype] = torch.log_softmax(engine.prompt_logits(messages), -1)
    ref, low = out[torch.float32], out[torch.bfloat16]
    top = ref.topk(10).indices
    diff = float((ref - low)[top].abs().max())
    return {"top1_agree": bool(ref.argmax() == low.argmax()), "max_abs_logprob_diff": diff}


def pick_dtype(model: Any, tokenizer: Any, choice: str) -> tuple[torch.dtype, str]:
    """The engine's compute dtype and why: bf16 when asked, or under "auto" only when it is both faster
    than fp32 at this model's MLP shape on this machine and close in the probe's log-probs."""
    if choice == "float32":
        return torch.float32, "float32 requested"
    if choice == "bfloat16":
        return torch.bfloat16, "bfloat16 requested"
    speedup = bf16_matmul_speedup(model)
    if speedup < 1.25:
        return torch.float32, f"auto: bf16 matmul not faster here ({speedup:.2f}x fp32 speed)"
    check = bf16_numerics(model, tokenizer)
    if not check["top1_agree"] or check["max_abs_logprob_diff"] > 0.5:
        return torch.float32, f"auto: bf16 numerics off ({check})"
    return torch.bfloat16, f"auto: bf16 {speedup:.2f}x faster, numerics {check}"


def bf16_matmul_speedup(model: Any) -> float:
    """fp32 time / bf16 time of this model's MLP matmul at batch 64 on this machine (best of 8 each).
    Many CPUs advertise bf16 yet run it slower than fp32 through torch; only a measurement tells."""
    cfg = base_model(model).config
    shape = (64, cfg.hidden_size, 2 * getattr(cfg, "intermediate_size", 4 * cfg.hidden_size))
    fp32, bf16 = (_linear_seconds(*shape, dtype) for dtype in (torch.float32, torch.bfloat16))
    return fp32 / bf16
