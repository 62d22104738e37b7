"""The engine bench: HFEngine and FastEngine against transformers' generate on one batch of chat prompts,
tokens counted exactly and completions compared token by token."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from whale.bench.settings import (
    INSTRUCTION,
    SEED,
    SYSTEM_PROMPT,
    BenchSettings,
)


def bench_prompts(n: int) -> list[list[dict[str, str]]]:
    """`n` chat prompts from the math domain's generated problems (the same on both sides)."""
    tasks = _math_tasks(n)
    return [
        [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{t.inputs['question']} {INSTRUCTION}"},
        ]
        for t in tasks
    ]


def _math_tasks(n: int) -> list[Any]:
    from whale.domains.math import MathDomain

    sizes = {"train": n, "search": 1, "val": 1, "test": 1}
    return MathDomain(seed=SEED, sizes=sizes).splits()["train"][:n]


def trim_at_eos(ids: list[int], eos_ids: set[int], limit: int) -> list[int]:
    """A completion as the engine records it: up to and including the first EOS, at most `limit` tokens."""
    out = []
    for tok in ids[:limit]:
        out.append(tok)
        if tok in eos_ids:
            break
    return out


def run_hf_generate(
    model: Any, tokenizer: Any, prompts: list[list[dict[str, str]]], max_new_tokens: int, eos_ids: set[int]
) -> tuple[list[list[int]], list[int], float]:
    """transformers' own generate, greedy, left padded; returns completions trimmed at EOS, prompt lengths and
    seconds (chat template, generate and detokenization all inside the timed region, as for the engine)."""
    import torch
    from transformers import GenerationConfig

    from whale.model.sampling import chat_prompt_ids

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    config = GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=sorted(eos_ids), pad_token_id=pad_id
    )
    model.eval()
    start = time.perf_counter()
    ids = [chat_prompt_ids(tokenizer, p) for p in prompts]
    width = max(len(i) for i in ids)
    input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, seq in enumerate(ids):
        input_ids[row, width - len(seq) :] = torch.tensor(seq)
        mask[row, width - len(seq) :] = 1
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)
    completions = [trim_at_eos(row.tolist(), eos_ids, max_new_tokens) for row in out[:, width:]]
    tokenizer.batch_decode(completions, skip_special_tokens=True)
    seconds = time.perf_counter() - start
    return completions, [len(i) for i in ids], seconds


def _timed_generate(engine: Any, prompts: list[Any], params: Any) -> tuple[list[Any], float]:
    from whale.model.engine import GenerationRequest

    start = time.perf_counter()
    gens = engine.generate([GenerationRequest(m, params) for m in prompts], seed=SEED)
    return gens, time.perf_counter() - start


def _engine_side(gens: list[Any], seconds: float) -> dict[str, Any]:
    tokens = sum(len(g.completion_ids) for g in gens)
    return {
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "eos_rows": sum(g.finish_reason == "eos" for g in gens),
    }


def bench_engine(
    model: Any, tokenizer: Any, settings: BenchSettings, bound: float, log: Callable[[str], None]
) -> tuple[dict[str, Any], list[Any]]:
    """The engine section, and the engine's generations for the largest batch (the trainer's data).

    "engine" is whale's own engine (FastEngine, fp32 here: see `dtype_reason`); "plain_engine" is
    HFEngine, whale's engine over transformers' forward, kept as the reference implementation."""
    from whale.model.dtype_probe import pick_dtype
    from whale.model.engine import GenerationRequest, SamplingParams
    from whale.model.fast_engine import FastEngine
    from whale.model.hf_engine import HFEngine

    greedy = SamplingParams(temperature=0.0, max_tokens=settings.max_new_tokens)
    dtype, dtype_reason = pick_dtype(model, tokenizer, "auto")
    warm = bench_prompts(2)
    tiny = [GenerationRequest(m, SamplingParams(0.0, max_tokens=2)) for m in warm]
    plain_warm = HFEngine(model, tokenizer, max_batch=2)
    plain_warm.generate(tiny, seed=SEED)
    FastEngine(model, tokenizer, max_batch=2, dtype=dtype).generate(tiny, seed=SEED)
    run_hf_generate(model, tokenizer, warm, 2, plain_warm.eos_ids)
    runs, largest = [], []
    for batch in settings.batch_sizes:
        prompts = bench_prompts(batch)
        engine = FastEngine(model, tokenizer, max_batch=batch, dtype=dtype)
        log(f"engine: batch {batch}, {settings.max_new_tokens} new tokens: FastEngine.generate")
        gens, engine_s = _timed_generate(engine, prompts, greedy)
        log(f"engine: batch {batch}: HFEngine.generate")
        plain_gens, plain_s = _timed_generate(HFEngine(model, tokenizer, max_batch=batch), prompts, greedy)
        if batch == max(settings.batch_sizes):
            largest = gens
        log(f"engine: batch {batch}: transformers model.generate")
        hf_completions, prompt_lens, hf_s = run_hf_generate(
            model, tokenizer, prompts, settings.max_new_tokens, engine.eos_ids
        )
        hf_tokens = sum(len(c) for c in hf_completions)
        matching = [g.completion_ids == c for g, c in zip(gens, hf_completions, strict=True)]
        side = _engine_side(gens, engine_s)
        hf_tps = hf_tokens / hf_s
        prompt_tokens = sum(prompt_lens)
        runs.append(
            {
                "batch": batch,
                "prompt_tokens": prompt_tokens,
                "prompt_tokens_computed": engine.prefill_computed,
                "prompt_tokens_reused": engine.prefill_reused,
                "engine": side,
                "plain_engine": _engine_side(plain_gens, plain_s),
                "transformers": {
                    "tokens": hf_tokens,
                    "seconds": hf_s,
                    "tokens_per_s": hf_tps,
                    "eos_rows": sum(bool(c) and c[-1] in engine.eos_ids for c in hf_completions),
                },
                "ratio": side["tokens_per_s"] / hf_tps,
                "plain_ratio": len(plain_gens)
                and sum(len(g.completion_ids) for g in plain_gens) / plain_s / hf_tps,
                "roofline_pct": 100 * side["tokens_per_s"] / bound,
                "roofline_pct_incl_prompt": 100 * (side["tokens"] + prompt_tokens) / engine_s / bound,
                "rows": len(matching),
                "rows_matching": sum(matching),
                "greedy_match": all(matching),
                "plain_rows_matching": sum(
                    g.completion_ids == c for g, c in zip(plain_gens, hf_completions, strict=True)
                ),
            }
        )
    section = {
        "engine": "FastEngine",
        "dtype": str(dtype).removeprefix("torch."),
        "dtype_reason": dtype_reason,
        "sampling": "greedy (temperature 0), stop at EOS",
        "max_new_tokens": settings.max_new_tokens,
        "tokens_counted": "completion tokens up to and including the first EOS, per row",
        "runs": runs,
        "greedy_match": all(r["greedy_match"] for r in runs),
    }
    return section, largest
