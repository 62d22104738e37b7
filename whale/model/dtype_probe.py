"""`dtype: auto`: time the model's own matmul shapes in fp32 and bf16 and take bf16 only where it is
clearly faster and numerically close (docs/performance.md)."""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
import torch.nn.functional as F

from whale.model.fast_engine import FastEngine
from whale.model.packed_weights import base_model

BF16_FASTER = 1.25  # bf16 matmuls must be this much faster to be chosen: below it, the gain is noise
MIN_TIMED_FLOPS = 20e6  # below this a matmul takes microseconds and its timing is noise (the tiny model: 2M)


def _linear_seconds(m: int, k: int, n: int, reps: int = 8) -> dict[torch.dtype, float]:
    """Best time of `reps` for one linear layer in fp32 and in bf16, the two alternated rep by rep, so
    that a burst of other work on the cores slows both alike instead of one of them."""
    import time

    x, w = torch.randn(m, k), torch.randn(n, k)
    pairs = {dtype: (x.to(dtype), w.to(dtype)) for dtype in (torch.float32, torch.bfloat16)}
    best = dict.fromkeys(pairs, float("inf"))
    for a, b in pairs.values():
        F.linear(a, b)
    for _ in range(reps):
        for dtype, (a, b) in pairs.items():
            start = time.perf_counter()
            F.linear(a, b)
            best[dtype] = min(best[dtype], time.perf_counter() - start)
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
    faster, why = bf16_pays(model)
    if not faster:
        return torch.float32, f"auto: {why}"
    check = bf16_numerics(model, tokenizer)
    if not check["top1_agree"] or check["max_abs_logprob_diff"] > 0.5:
        return torch.float32, f"auto: bf16 numerics off ({check})"
    return torch.bfloat16, f"auto: {why}, numerics {check}"


def measured_dtype(model: Any) -> str:
    """The `auto` choice without the numerics probe (it needs the fast engine): the trainer's and vLLM's."""
    return "bfloat16" if bf16_pays(model)[0] else "float32"


def bf16_pays(model: Any) -> tuple[bool, str]:
    """Whether bf16 matmuls at this model's MLP shape (batch 64) run clearly faster than fp32 here, and
    why. Many CPUs advertise bf16 yet run it slower through torch; only a measurement tells. A model
    whose matmuls take microseconds (the tiny test model) cannot be timed reliably: float32."""
    cfg = base_model(model).config
    shape = (64, cfg.hidden_size, 2 * getattr(cfg, "intermediate_size", 4 * cfg.hidden_size))
    flops = 2 * shape[0] * shape[1] * shape[2]
    if flops < MIN_TIMED_FLOPS:
        return False, f"matmuls too small to time ({flops / 1e6:.0f} MFLOP), float32"
    speedup = _shape_speedup(shape)
    if speedup < BF16_FASTER:
        return False, f"bf16 matmul not faster here ({speedup:.2f}x fp32 speed)"
    return True, f"bf16 {speedup:.2f}x faster"


@cache
def _shape_speedup(shape: tuple[int, int, int]) -> float:
    """fp32 time / bf16 time, best of 8 each, alternated; measured once per process and shape, so that
    the trainer and the engines of a run decide alike."""
    best = _linear_seconds(*shape)
    return best[torch.float32] / best[torch.bfloat16]
