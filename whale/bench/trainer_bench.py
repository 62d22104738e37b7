"""The trainer bench: whale's Trainer against TRL's SFTTrainer (when installed) or a plain peft + torch
loop, both LoRA, same examples and config."""

from __future__ import annotations

import copy
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whale.bench.settings import (
    SEED,
    BenchSettings,
)


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
