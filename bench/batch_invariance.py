"""Whether a seeded sample depends on the batch it was decoded in, in float32 and in bfloat16.

    python bench/batch_invariance.py --out docs/bench/DATE-batch-invariance.json

whale's runner hands the engine model calls as the harnesses make them, so which requests share a decode
step depends on timing. A per-request seed fixes the random draws, not the logits: if the logits of a
row change with the batch around it, a near tie can go the other way and a run stops reproducing. This
decodes one set of seeded requests (16 math prompts x 4 samples, T=1, 48 tokens) through FastEngine in
several batch compositions and counts completions identical to the reference (all 64 in one batch):
the same batch again, the requests in reverse order, at most 16 rows at a time, and one at a time.

`--tiles` adds a mitigation: every linear layer run in fixed 16-row tiles and attention in float32,
so a row's matmuls see one shape whatever the batch. Its cost is timed beside the plain engine.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

import whale.model.fast_engine as fast_engine
from whale.bench.machine import machine_facts
from whale.bench.settings import SEED
from whale.core.provenance import code_version
from whale.model.engine import GenerationRequest, SamplingParams
from whale.model.loading import load_model

TILE = 16


def requests() -> list[GenerationRequest]:
    prompts = [f"What is {a} + {b} * {a + b}? Answer with a number." for a in range(4) for b in range(4)]
    params = SamplingParams(temperature=1.0, max_tokens=48)
    return [
        GenerationRequest([{"role": "user", "content": p}], params, seed=1000 + 10 * i + j)
        for i, p in enumerate(prompts)
        for j in range(4)
    ]


def tiled_functional() -> Any:
    """torch.nn.functional with linear in fixed-size row tiles and attention in float32."""

    def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        n = flat.shape[0]
        if n % TILE:
            flat = torch.cat([flat, flat.new_zeros(TILE - n % TILE, flat.shape[1])])
        out = torch.cat([F.linear(flat[i : i + TILE], w, b) for i in range(0, flat.shape[0], TILE)])
        return out[:n].reshape(*x.shape[:-1], out.shape[-1])

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), **kw).to(q.dtype)

    names = {n: getattr(F, n) for n in dir(F) if not n.startswith("_")}
    return SimpleNamespace(**{**names, "linear": linear, "scaled_dot_product_attention": attention})


def decode(model: Any, tokenizer: Any, dtype: torch.dtype, max_batch: int, order: Callable) -> tuple:
    reqs = requests()
    engine = fast_engine.FastEngine(model, tokenizer, dtype=dtype, max_batch=max_batch)
    start = time.perf_counter()
    out = order([g.completion_ids for g in engine.generate(order(reqs), 0)])
    return out, time.perf_counter() - start


def compositions(model: Any, tokenizer: Any, dtype: torch.dtype) -> dict[str, Any]:
    forward, backward = (lambda xs: xs), (lambda xs: xs[::-1])
    reference, wall = decode(model, tokenizer, dtype, 64, forward)
    rows: dict[str, Any] = {"reference_wall_s": wall}
    for name, max_batch, order in (
        ("same batch again", 64, forward),
        ("reverse order", 64, backward),
        ("16 rows at a time", 16, forward),
        ("one at a time", 1, forward),
    ):
        out, wall = decode(model, tokenizer, dtype, max_batch, order)
        same = sum(a == b for a, b in zip(reference, out, strict=True))
        rows[name] = {"identical": same, "of": len(out), "wall_s": wall}
        print(f"{dtype} {name}: {same}/{len(out)} identical ({wall:.1f} s)", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiles", action="store_true", help="also run the fixed-tile mitigation")
    args = parser.parse_args()
    model, tokenizer = load_model("embedded", SEED)
    model.eval()
    result: dict[str, Any] = {"commit": code_version(), "machine": machine_facts(model), "runs": []}
    variants = [("plain", F)] + ([("tiles", tiled_functional())] if args.tiles else [])
    for variant, functional in variants:
        fast_engine.F = functional
        for dtype in (torch.float32, torch.bfloat16):
            rows = compositions(model, tokenizer, dtype)
            result["runs"].append({"variant": variant, "dtype": str(dtype).removeprefix("torch."), **rows})
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")
    fast_engine.F = F


if __name__ == "__main__":
    main()
