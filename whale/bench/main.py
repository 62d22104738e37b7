"""`whale bench`: whale's engine, trainer and rollout pipeline measured beside plain Hugging Face baselines.

One run, one model, the same prompts and lengths on both sides of every comparison:

  roofline  best-of-N matmul GFLOP/s in fp32 and bf16 on the model's own shapes, turned into a tokens/s
            bound with FLOPs/token = 2 x (parameters that take part in a matmul per token);
  engine    HFEngine.generate vs transformers' model.generate on one batch of chat prompts (greedy, left
            padding, both stop at EOS); tokens counted exactly, completions compared token by token;
  trainer   whale's Trainer vs TRL's SFTTrainer (when `trl` is importable) or else a minimal peft + torch
            loop that pads every micro-batch to its longest sequence, both LoRA, same examples and config;
  rollout   RolloutRunner with a multi-call harness on the math domain vs the time spent inside the engine
            during that run: overhead = (pipeline wall - engine time) / pipeline wall.

Every raw number, the ratios computed from them, and the machine's facts go to `<out>/bench.json`; rich
tables go to the console. Ratios are plain quotients of the raw numbers stored beside them (the test
recomputes them). Numbers from a loaded machine are noise: see docs/performance.md.
"""

from __future__ import annotations

import copy
import importlib.metadata
import json
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA = 1
SEED = 0
SYSTEM_PROMPT = "You are a helpful assistant. Solve the math problem."
INSTRUCTION = "Think step by step, then write: The answer is <number>."
FLOPS_FORMULA = (
    "FLOPs/token = 2 x matmul parameters; matmul parameters = all parameters minus the input-embedding "
    "table (a lookup, no FLOPs), counting the LM head once; with tied embeddings that is all parameters. "
    "Attention over the context (QK^T, AV) is left out, so the bound is slightly optimistic for the model."
)
TARGETS = {"engine_vs_transformers": 3.0, "engine_roofline_pct": 50.0, "trainer_vs_baseline": 1.5}
OVERHEAD_TARGET = 0.10


@dataclass(frozen=True)
class BenchSettings:
    batch_sizes: tuple[int, ...]
    max_new_tokens: int
    matmul_min_s: float  # each timed matmul sample runs at least this long
    matmul_samples: int  # best of this many samples
    train_examples: int
    minibatch: int
    micro_batch: int
    rollout_tasks: int
    rollout_workers: int
    rollout_max_tokens: int


QUICK = BenchSettings(
    batch_sizes=(8,), max_new_tokens=12, matmul_min_s=0.02, matmul_samples=3, train_examples=8,
    minibatch=4, micro_batch=2, rollout_tasks=4, rollout_workers=4, rollout_max_tokens=6,
)  # fmt: skip
FULL = BenchSettings(
    batch_sizes=(16, 64), max_new_tokens=48, matmul_min_s=0.2, matmul_samples=3, train_examples=64,
    minibatch=32, micro_batch=16, rollout_tasks=32, rollout_workers=32, rollout_max_tokens=32,
)  # fmt: skip

# Three model calls and one calculator call per rollout; MAX_TOKENS is filled in by the bench.
BENCH_HARNESS = '''\
"""Bench harness: plan, check, answer (three llm.chat calls) around one calculator call."""

import re

MAX_TOKENS = __MAX_TOKENS__


def last_number(text):
    found = re.findall(r"-?\\d+(?:\\.\\d+)?", text)
    return found[-1] if found else None


def run(task, llm, tools):
    question = task["question"]
    messages = [
        {"role": "system", "content": "You are a careful math tutor."},
        {"role": "user", "content": question + " Write one arithmetic expression for the answer."},
    ]
    plan = llm.chat(messages, max_tokens=MAX_TOKENS)
    found = re.search(r"\\d+(?:\\s*[-+*/]\\s*\\d+)+", plan)
    expression = found.group(0) if found else " + ".join(re.findall(r"\\d+", question)[:2]) or "0"
    try:
        value = tools.calculator(expression)
    except Exception:
        value = "no value"
    messages = messages + [
        {"role": "assistant", "content": plan},
        {"role": "user", "content": "A calculator gives " + value + ". Check the steps briefly."},
    ]
    check = llm.chat(messages, max_tokens=MAX_TOKENS)
    messages = messages + [
        {"role": "assistant", "content": check},
        {"role": "user", "content": "Give the final answer as a number."},
    ]
    final = llm.chat(messages, max_tokens=MAX_TOKENS)
    return last_number(final) or last_number(check) or last_number(value) or "0"
'''


# ---- machine facts and memory ----------------------------------------------------------------------------


def machine_facts(model: Any) -> dict[str, Any]:
    import torch

    cpu, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and cpu == "unknown":
                cpu = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    versions = {}
    for package in ("torch", "transformers", "peft", "trl"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
    return {
        "cpu_model": cpu,
        "cpu_flags": sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "fma"}),
        "cpu_count": os.cpu_count(),
        "usable_cores": usable,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "dtype": dtypes[0] if len(dtypes) == 1 else dtypes,
        "versions": versions,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": list(os.getloadavg()),
    }


def _rusage_mib(who: int) -> float:
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is bytes on macOS, KiB on Linux
    return resource.getrusage(who).ru_maxrss * scale / 2**20


def vm_hwm_mib(pid: int | str = "self", field: str = "VmHWM") -> float | None:
    """A process's peak (VmHWM) or current (VmRSS) resident set in MiB, from /proc; None where not there."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


@contextmanager
def memory_probe(into: dict[str, Any]) -> Iterator[None]:
    """Fill `into` with this part's peak memory.

    The peak is reset when the part starts (writing 5 to /proc/self/clear_refs, Linux), so that both
    `maxrss_mib` (getrusage's ru_maxrss) and `peak_rss_mib` (/proc VmHWM) are this part's own peak. Where the
    reset is refused, `reset` is false and maxrss_mib is the process's high-water mark so far, earlier parts
    included. `rss_start_mib` is the resident set when the part starts: memory that earlier parts freed but
    the allocator kept counts towards the peak too.
    """
    rss = vm_hwm_mib(field="VmRSS")
    into["rss_start_mib"] = None if rss is None else round(rss, 1)
    try:
        Path("/proc/self/clear_refs").write_text("5")
        reset = True
    except OSError:
        reset = False
    try:
        yield
    finally:
        hwm = vm_hwm_mib()
        into["reset"] = reset
        into["maxrss_mib"] = round(_rusage_mib(resource.RUSAGE_SELF), 1)
        into["peak_rss_mib"] = None if hwm is None or not reset else round(hwm, 1)


# ---- roofline ------------------------------------------------------------------------------------------


def model_flops(model: Any) -> dict[str, Any]:
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is not None and head.weight.data_ptr() == emb.data_ptr()
    total = sum(p.numel() for p in model.parameters())  # a tied matrix is counted once
    matmul = total if tied else total - emb.numel()
    return {
        "params_total": total,
        "params_embedding": emb.numel(),
        "tied_embeddings": tied,
        "params_matmul": matmul,
        "flops_per_token": 2 * matmul,
        "flops_per_token_non_embedding": 2 * (total - emb.numel() * (1 if tied else 2)),
        "formula": FLOPS_FORMULA,
    }


def best_matmul(m: int, k: int, n: int, dtype: Any, min_s: float, samples: int) -> dict[str, Any]:
    """Best-of-`samples` GFLOP/s of [m x k] @ [k x n]; each sample repeats the matmul for >= min_s."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    for _ in range(3):
        torch.matmul(a, b)  # warm-up: first calls pay for kernel selection and allocation
    iters, elapsed = 1, 0.0
    while True:  # calibrate: double the count until one sample takes a quarter of min_s
        start = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b)
        elapsed = time.perf_counter() - start
        if elapsed >= min_s / 4 or iters >= 1 << 14:
            break
        iters *= 2
    iters = max(1, min(1 << 16, int(iters * min_s / max(elapsed, 1e-9))))
    best = float("inf")
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b)
        best = min(best, (time.perf_counter() - start) / iters)
    return {"shape": [m, k, n], "iters": iters, "best_s": best, "gflops": 2 * m * k * n / best / 1e9}


def bench_roofline(model: Any, settings: BenchSettings, log: Callable[[str], None]) -> dict[str, Any]:
    import torch

    cfg = model.config
    d, ff, vocab = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    m = max(settings.batch_sizes)
    shapes = {"mlp_up": (m, d, ff), "mlp_down": (m, ff, d), "attn_proj": (m, d, d), "lm_head": (m, d, vocab)}
    flops = model_flops(model)
    out: dict[str, Any] = {"model": flops, "matmul": [], "peak_gflops": {}, "bound_tokens_per_s": {}}
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        log(f"roofline: {name} matmuls")
        rows = []
        for label, (mm, kk, nn) in shapes.items():
            timing = best_matmul(mm, kk, nn, dtype, settings.matmul_min_s, settings.matmul_samples)
            rows.append({"name": label, "dtype": name, **timing})
        out["matmul"] += rows
        peak = max(r["gflops"] for r in rows)
        out["peak_gflops"][name] = peak
        out["bound_tokens_per_s"][name] = peak * 1e9 / flops["flops_per_token"]
    out["model_dtype"] = str(next(model.parameters()).dtype).removeprefix("torch.")
    # the machine's limit, whichever dtype reaches it: the engine may compute in either
    out["bound_dtype"] = max(out["bound_tokens_per_s"], key=out["bound_tokens_per_s"].get)
    out["bound"] = out["bound_tokens_per_s"][out["bound_dtype"]]
    return out


# ---- engine vs transformers.generate ----------------------------------------------------------------------


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


def _trim_at_eos(ids: list[int], eos_ids: set[int], limit: int) -> list[int]:
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

    from whale.model.hf_engine import chat_prompt_ids

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
    completions = [_trim_at_eos(row.tolist(), eos_ids, max_new_tokens) for row in out[:, width:]]
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

    "engine" is whale's default engine (FastEngine, fp32 here: see `dtype_reason`); "plain_engine" is
    HFEngine, whale's engine over transformers' forward, kept as the reference implementation."""
    from whale.model.engine import GenerationRequest, SamplingParams
    from whale.model.fast_engine import FastEngine, pick_dtype
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


# ---- trainer vs SFTTrainer / naive loop --------------------------------------------------------------------


def train_examples(tokenizer: Any, generations: list[Any], n: int) -> list[Any]:
    """`n` examples of prompt + completion ids with the completion masked in, cycling through `generations`
    (the engine's own greedy outputs, so lengths are what the model really produces)."""
    from whale.model.trainer import TrainExample

    out = []
    for i in range(n):
        g = generations[i % len(generations)]
        completion = g.completion_ids or [tokenizer.eos_token_id]
        out.append(TrainExample(g.prompt_ids + completion, [0] * len(g.prompt_ids) + [1] * len(completion)))
    return out


def _lora_config(cfg: Any, model: Any) -> Any:
    from peft import LoraConfig

    targets = [t for t in cfg.lora_targets if any(n.endswith(t) for n, _ in model.named_modules())]
    return LoraConfig(
        r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, target_modules=targets,
        task_type="CAUSAL_LM",
    )  # fmt: skip


def train_naive(model: Any, examples: list[Any], pad_id: int, cfg: Any) -> dict[str, Any]:
    """The naive baseline: peft + torch, examples in order, each micro-batch right-padded to its longest
    sequence (HF's padding="longest"), HF's label loss, gradient accumulation, clipping, AdamW."""
    import torch
    from peft import get_peft_model

    start = time.perf_counter()
    model = get_peft_model(model, _lora_config(cfg, model))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    setup_s = time.perf_counter() - start
    model.train()
    padded = 0
    start = time.perf_counter()
    for first in range(0, len(examples), cfg.minibatch):
        minibatch = examples[first : first + cfg.minibatch]
        optimizer.zero_grad(set_to_none=True)
        steps = -(-len(minibatch) // cfg.micro_batch)
        for m in range(0, len(minibatch), cfg.micro_batch):
            batch = minibatch[m : m + cfg.micro_batch]
            width = max(len(e.ids) for e in batch)
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            attn = torch.zeros((len(batch), width), dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            for row, e in enumerate(batch):
                seq = torch.tensor(e.ids)
                ids[row, : len(e.ids)] = seq
                attn[row, : len(e.ids)] = 1
                labels[row, : len(e.ids)] = seq.masked_fill(torch.tensor(e.mask) == 0, -100)
            padded += ids.numel()
            loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
            (loss / steps).backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        optimizer.step()
    seconds = time.perf_counter() - start
    model.eval()
    return {"seconds": seconds, "setup_s": setup_s, "padded_tokens": padded}


def train_sft(model: Any, tokenizer: Any, examples: list[Any], cfg: Any, workdir: Path) -> dict[str, Any]:
    """TRL's SFTTrainer on the same pre-tokenized examples (labels -100 outside the completion), same LoRA
    config, batch, accumulation, learning rate (constant) and clipping; CPU, no logging, no checkpoints, no
    gradient checkpointing (TRL's default turns it on; whale trades no compute for memory either)."""
    import pyarrow
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    start = time.perf_counter()
    # Built from an Arrow table with a fixed fingerprint: hashing the data is not what is measured (and some
    # datasets/dill/pyarrow combinations cannot hash it at all).
    table = pyarrow.table(
        {
            "input_ids": [e.ids for e in examples],
            "labels": [[t if k else -100 for t, k in zip(e.ids, e.mask, strict=True)] for e in examples],
        }
    )
    data = Dataset(table, fingerprint="whale-bench")
    args = SFTConfig(
        output_dir=str(workdir), per_device_train_batch_size=cfg.micro_batch,
        gradient_accumulation_steps=max(1, cfg.minibatch // cfg.micro_batch), learning_rate=cfg.lr,
        weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm, num_train_epochs=cfg.epochs,
        lr_scheduler_type="constant", warmup_steps=0, logging_strategy="no", save_strategy="no",
        report_to="none", use_cpu=True, seed=SEED, max_length=None, disable_tqdm=True,
        dataloader_num_workers=0, dataset_kwargs={"skip_prepare_dataset": True}, gradient_checkpointing=False,
    )  # fmt: skip
    trainer = SFTTrainer(
        model=model, args=args, train_dataset=data, processing_class=tokenizer,
        peft_config=_lora_config(cfg, model),
    )  # fmt: skip
    trainer.remove_callback(PrinterCallback)  # it prints the final metrics dict even with logging off
    setup_s = time.perf_counter() - start
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "setup_s": setup_s}


def trl_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("trl", "datasets", "pyarrow"))


def bench_trainer(
    model: Any, tokenizer: Any, examples: list[Any], settings: BenchSettings, log: Callable[[str], None]
) -> dict[str, Any]:
    from whale.model.trainer import Trainer, TrainerConfig

    cfg = TrainerConfig(lora=True, minibatch=settings.minibatch, micro_batch=settings.micro_batch)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    completion = sum(sum(e.mask[1:]) for e in examples)  # targets: a token predicted from the one before
    total = sum(len(e.ids) for e in examples)
    # One untimed LoRA step on a throwaway copy warms peft, autograd and AdamW for whichever side runs first.
    train_naive(copy.deepcopy(model), examples[: settings.micro_batch], pad_id, cfg)

    log(f"trainer: whale Trainer on {len(examples)} examples")
    start = time.perf_counter()
    trainer = Trainer(copy.deepcopy(model), pad_id, cfg, seed=SEED)
    setup_s = time.perf_counter() - start
    start = time.perf_counter()
    stats = trainer.train(examples)
    whale_s = time.perf_counter() - start
    del trainer

    base, label, kind, trl_error = None, "trl.SFTTrainer", "trl", None
    if trl_available():
        log("trainer: baseline trl.SFTTrainer")
        try:
            with tempfile.TemporaryDirectory(prefix="whale-bench-sft-") as tmp:
                base = train_sft(copy.deepcopy(model), tokenizer, examples, cfg, Path(tmp))
        except Exception as exc:  # noqa: BLE001 - an incompatible trl install falls back to the naive loop
            trl_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            log(f"trainer: trl.SFTTrainer failed ({trl_error}); using the naive loop")
    if base is None:
        label, kind = "naive peft+torch loop (pad to longest in micro-batch)", "naive"
        log(f"trainer: baseline {label}")
        base = train_naive(copy.deepcopy(model), examples, pad_id, cfg)

    def side(seconds: float, setup: float, **extra: Any) -> dict[str, Any]:
        return {
            "seconds": seconds, "setup_s": setup, "completion_tokens": completion, "total_tokens": total,
            "completion_tokens_per_s": completion / seconds, "total_tokens_per_s": total / seconds, **extra,
        }  # fmt: skip

    whale_side = side(
        whale_s, setup_s, reported_tokens=stats["tokens"], optimizer_steps=stats["optimizer_steps"]
    )
    base_side = side(
        base["seconds"], base["setup_s"], **{k: v for k, v in base.items() if k == "padded_tokens"}
    )
    return {
        "baseline": label,
        "baseline_kind": kind,
        "trl_error": trl_error,
        "examples": len(examples),
        "config": {
            "lora_r": cfg.lora_r,
            "lora_alpha": cfg.lora_alpha,
            "lr": cfg.lr,
            "minibatch": cfg.minibatch,
            "micro_batch": cfg.micro_batch,
            "epochs": cfg.epochs,
            "max_grad_norm": cfg.max_grad_norm,
        },
        "tokens_counted": "completion: masked-in target tokens (mask[1:]); total: every real token",
        "whale": whale_side,
        "baseline_result": base_side,
        "ratio": whale_side["completion_tokens_per_s"] / base_side["completion_tokens_per_s"],
        "ratio_total": whale_side["total_tokens_per_s"] / base_side["total_tokens_per_s"],
    }


# ---- rollout pipeline ------------------------------------------------------------------------------------


class TimedEngine:
    """Wraps an engine: every generate call is timed, and its requests and tokens counted."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.weights_version = engine.weights_version
        self.reset()

    def reset(self) -> None:
        self.seconds, self.calls, self.requests, self.tokens, self.prompt_tokens = 0.0, 0, 0, 0, 0
        self.batch_sizes: list[int] = []

    def generate(self, requests: list[Any], seed: int) -> list[Any]:
        start = time.perf_counter()
        out = self.engine.generate(requests, seed)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        self.requests += len(requests)
        self.batch_sizes.append(len(requests))
        self._count(out)
        return out

    def _count(self, out: list[Any]) -> None:
        self.tokens += sum(len(g.completion_ids) for g in out)
        self.prompt_tokens += sum(len(g.prompt_ids) for g in out)


class TimedStepEngine(TimedEngine):
    """TimedEngine for an engine that takes requests one by one: the runner then batches continuously,
    and the time inside `step` is the engine's time."""

    @property
    def busy(self) -> bool:
        return self.engine.busy

    def submit(self, request: Any, seed: int) -> int:
        self.requests += 1
        return self.engine.submit(request, seed)

    def cancel(self, handles: set[int] | None = None) -> None:
        self.engine.cancel(handles)

    def step(self) -> list[tuple[int, Any]]:
        start = time.perf_counter()
        done = self.engine.step()
        self.seconds += time.perf_counter() - start
        self.calls += 1
        self.batch_sizes.append(len(self.engine._rows))
        self._count([g for _, g in done])
        return done


def bench_rollout(
    model: Any, tokenizer: Any, settings: BenchSettings, log: Callable[[str], None]
) -> dict[str, Any]:
    from whale.core.config import Config
    from whale.domains.math import MathDomain
    from whale.harness.records import HarnessCandidate
    from whale.harness.runner import RolloutJob, RolloutRunner, RunnerLimits
    from whale.model.backends import build_engine
    from whale.model.engine import GenerationRequest, SamplingParams

    base = Config()
    inner = build_engine(base.engine, model, tokenizer, base.model.max_batch)
    # Untimed warm-up after the trainer's allocations: cold and warm runs then differ only in workers.
    inner.generate([GenerationRequest(m, SamplingParams(0.0, max_tokens=2)) for m in bench_prompts(2)], SEED)
    continuous = TimedStepEngine(inner)
    barrier = TimedEngine(inner)
    sizes = {"train": 1, "search": settings.rollout_tasks, "val": 1, "test": 1}
    domain = MathDomain(seed=SEED, sizes=sizes)
    tasks = domain.splits()["search"]
    s = base.sampling
    sampling = SamplingParams(s.temperature, s.top_p, s.top_k, settings.rollout_max_tokens)
    limits = RunnerLimits(workers=settings.rollout_workers, step_timeout_s=60.0)
    harness = HarnessCandidate(
        "bench", BENCH_HARNESS.replace("__MAX_TOKENS__", str(settings.rollout_max_tokens))
    )
    runner = RolloutRunner(continuous, domain, sampling, limits, seed=SEED)
    runs = {}
    try:
        # cold starts the worker processes; warm reuses them, as a run does; barrier is warm again with the
        # engine seen through generate() only: one batch once every busy worker waits (no continuous batching)
        for phase in ("cold", "warm", "barrier"):
            log(f"rollout: {len(tasks)} rollouts ({phase})")
            engine = barrier if phase == "barrier" else continuous
            runner.engine, runner.continuous = engine, engine is continuous
            engine.reset()
            jobs = [RolloutJob(t, harness, 0, salt=phase) for t in tasks]
            start = time.perf_counter()
            rollouts = runner.run(jobs)
            wall = time.perf_counter() - start
            errors = sorted({r.error.split(":")[0] for r in rollouts if r.error})
            runs[phase] = {
                "rollouts": len(rollouts),
                "failed": sum(r.error is not None for r in rollouts),
                "error_kinds": errors,
                "model_calls": sum(len(r.calls) for r in rollouts),
                "tool_calls": sum(len(r.tool_calls) for r in rollouts),
                "wall_s": wall,
                "engine_s": engine.seconds,
                "engine_calls": engine.calls,
                "engine_requests": engine.requests,
                "engine_batch_sizes": list(engine.batch_sizes),
                "generated_tokens": engine.tokens,
                "prompt_tokens": engine.prompt_tokens,
                "tokens_per_s": engine.tokens / wall,
                "engine_tokens_per_s": engine.tokens / engine.seconds if engine.seconds else 0.0,
                "overhead": (wall - engine.seconds) / wall,
            }
        workers = [vm_hwm_mib(w.proc.pid) for w in runner.idle]  # before close() ends them
    finally:
        runner.close()
    workers = [w for w in workers if w is not None]
    return {
        "domain": "math",
        "harness": "3 llm.chat calls + 1 calculator call per rollout",
        "workers": settings.rollout_workers,
        "max_tokens": settings.rollout_max_tokens,
        "sampling": {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k},
        "engine": type(inner).__name__,
        "overhead_formula": "(wall_s - engine_s) / wall_s; engine_s sums the time inside the engine",
        "continuous_speedup": runs["barrier"]["wall_s"] / runs["warm"]["wall_s"],
        "sandbox_problems": list(runner.sandbox_problems),
        "runs": runs,
        "overhead": runs["warm"]["overhead"],
        "worker_peak_rss_mib": {
            "count": len(workers),
            "max": max(workers, default=None),
            "sum": round(sum(workers), 1),
        },
    }


# ---- driver and tables -----------------------------------------------------------------------------------


def run_bench(model: str, out: Path, quick: bool, console: Any) -> dict[str, Any]:
    """Run every part on `model` ("embedded", "tiny", or a folder); write `<out>/bench.json`; print tables."""
    import torch

    from whale.model.loading import load_model

    settings = QUICK if quick else FULL
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)  # before minutes of work, so an unwritable folder fails first

    def log(message: str) -> None:
        console.print(f"[dim]{time.perf_counter() - started:7.1f}s  {message}[/dim]", highlight=False)
        console.file.flush()

    log(f"loading model {model!r}")
    lm, tokenizer = load_model(model, SEED)
    lm.eval()
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "model": model,
        "quick": quick,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),  # noqa: UP017
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(settings).items()},
        "machine": machine_facts(lm),
        "targets": {**TARGETS, "rollout_overhead_max": OVERHEAD_TARGET},
    }
    with torch.no_grad():
        mem: dict[str, Any] = {}
        with memory_probe(mem):
            result["roofline"] = bench_roofline(lm, settings, log)
        result["roofline"]["memory"] = mem
        mem = {}
        with memory_probe(mem):
            result["engine"], gens = bench_engine(lm, tokenizer, settings, result["roofline"]["bound"], log)
        result["engine"]["memory"] = mem
    # The trainer trains on what the engine generated for the largest batch of prompts.
    examples = train_examples(tokenizer, gens, settings.train_examples)
    mem = {}
    with torch.enable_grad(), memory_probe(mem):
        result["trainer"] = bench_trainer(lm, tokenizer, examples, settings, log)
    result["trainer"]["memory"] = mem
    mem = {}
    with torch.no_grad(), memory_probe(mem):
        result["rollout"] = bench_rollout(lm, tokenizer, settings, log)
    result["rollout"]["memory"] = mem
    result["machine"]["loadavg_end"] = list(os.getloadavg())
    result["elapsed_s"] = time.perf_counter() - started
    result["verdicts"] = verdicts(result)
    path = out / "bench.json"
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print_tables(result, console)
    console.print(f"bench: {path}")
    return result


def verdicts(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target against the figure it is read from (the largest batch for the engine)."""
    run = max(result["engine"]["runs"], key=lambda r: r["batch"])
    rows = [
        ("engine tokens/s vs transformers.generate", run["ratio"], ">=", TARGETS["engine_vs_transformers"]),
        ("engine tokens/s as % of roofline", run["roofline_pct"], ">=", TARGETS["engine_roofline_pct"]),
        (f"trainer vs {result['trainer']['baseline_kind']} baseline", result["trainer"]["ratio"], ">=",
         TARGETS["trainer_vs_baseline"]),
        ("sandbox+IPC share of rollout wall (warm)", result["rollout"]["overhead"], "<=", OVERHEAD_TARGET),
    ]  # fmt: skip
    return [
        {"name": name, "value": value, "op": op, "target": target,
         "met": value >= target if op == ">=" else value <= target}
        for name, value, op, target in rows
    ]  # fmt: skip


def _f(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def print_tables(result: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    m = result["machine"]
    facts = Table(title="machine", show_header=False)
    facts.add_row("cpu", f"{m['cpu_model']} ({m['usable_cores']} usable of {m['cpu_count']} cores)")
    facts.add_row("torch", f"{m['versions']['torch']}, {m['torch_threads']} threads, {m['dtype']}")
    facts.add_row("load average", f"start {m['loadavg_start'][0]:.2f}, end {m['loadavg_end'][0]:.2f}")
    facts.add_row("model", f"{result['model']} ({result['roofline']['model']['params_total']:,} params)")
    console.print(facts)

    roof = result["roofline"]
    table = Table(title="roofline: best matmul GFLOP/s")
    for col in ("shape \\[m x k] @ \\[k x n]", "name", "dtype", "GFLOP/s"):
        table.add_column(col)
    for r in roof["matmul"]:
        mm, kk, nn = r["shape"]
        table.add_row(f"\\[{mm}x{kk}] @ \\[{kk}x{nn}]", r["name"], r["dtype"], _f(r["gflops"]))
    console.print(table)
    console.print(
        f"bound ({roof['bound_dtype']}): {_f(roof['bound'])} tokens/s = peak "
        f"{_f(roof['peak_gflops'][roof['bound_dtype']])} GFLOP/s / {roof['model']['flops_per_token']:,} "
        f"FLOPs/token\n[dim]{roof['model']['formula']}[/dim]"
    )

    table = Table(title=f"engine: greedy, {result['engine']['max_new_tokens']} new tokens max")
    for col in ("batch", "engine tok", "engine s", "engine tok/s", "HFEngine tok/s", "HF tok", "HF s",
                "HF tok/s", "ratio", "% roofline", "EOS rows", "greedy match"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in result["engine"]["runs"]:
        e, h = r["engine"], r["transformers"]
        table.add_row(
            str(r["batch"]), str(e["tokens"]), _f(e["seconds"], 2), _f(e["tokens_per_s"]),
            _f(r["plain_engine"]["tokens_per_s"]), str(h["tokens"]), _f(h["seconds"], 2),
            _f(h["tokens_per_s"]), f"{r['ratio']:.2f}x", _f(r["roofline_pct"]),
            f"{e['eos_rows']}/{r['rows']}", f"{r['rows_matching']}/{r['rows']}",
        )  # fmt: skip
    console.print(table)

    t = result["trainer"]
    table = Table(title=f"trainer: LoRA, {t['examples']} examples, baseline = {t['baseline']}")
    for col in ("", "seconds", "completion tok", "completion tok/s", "total tok", "total tok/s"):
        table.add_column(col, justify="right")
    for name, s in (("whale Trainer", t["whale"]), (t["baseline_kind"], t["baseline_result"])):
        table.add_row(
            name, _f(s["seconds"], 2), str(s["completion_tokens"]), _f(s["completion_tokens_per_s"]),
            str(s["total_tokens"]), _f(s["total_tokens_per_s"]),
        )  # fmt: skip
    table.add_row("ratio", "", "", f"{t['ratio']:.2f}x", "", f"{t['ratio_total']:.2f}x")
    console.print(table)

    ro = result["rollout"]
    table = Table(title=f"rollout pipeline: math, {ro['harness']}")
    for col in ("workers", "rollouts", "failed", "wall s", "engine s", "tokens", "tok/s", "overhead"):
        table.add_column(col, justify="right")
    for phase, r in ro["runs"].items():
        table.add_row(
            f"{ro['workers']} ({phase})", str(r["rollouts"]), str(r["failed"]), _f(r["wall_s"], 2),
            _f(r["engine_s"], 2), str(r["generated_tokens"]), _f(r["tokens_per_s"]),
            f"{100 * r['overhead']:.1f}%",
        )  # fmt: skip
    console.print(table)

    table = Table(title="peak memory of the bench process (MiB)")
    for col in ("part", "RSS at start", "getrusage maxrss", "VmHWM", "scope"):
        table.add_column(col, justify="right")
    for part in ("roofline", "engine", "trainer", "rollout"):
        mem = result[part]["memory"]
        start, peak = (
            ("n/a" if mem[k] is None else _f(mem[k], 0)) for k in ("rss_start_mib", "peak_rss_mib")
        )
        scope = "this part" if mem["reset"] else "process so far"
        table.add_row(part, start, _f(mem["maxrss_mib"], 0), peak, scope)
    console.print(table)
    w = ro["worker_peak_rss_mib"]
    if w["count"]:
        console.print(
            f"sandbox workers: {w['count']}, peak RSS {_f(w['max'], 0)} MiB each at most, "
            f"{_f(w['sum'], 0)} MiB in all"
        )

    table = Table(title="targets")
    for col in ("figure", "value", "target", "met"):
        table.add_column(col)
    for v in result["verdicts"]:
        value = f"{100 * v['value']:.1f}%" if "share" in v["name"] else f"{v['value']:.2f}"
        target = f"{100 * v['target']:.0f}%" if "share" in v["name"] else f"{v['target']:g}"
        table.add_row(v["name"], value, f"{v['op']} {target}", "yes" if v["met"] else "[red]no[/red]")
    console.print(table)
