"""SFT on exact token sequences with loss masks; LoRA (peft) by default, full fine-tuning as an option.

The trainer wraps the same model object the engine serves, so an update is visible to the next rollout
without a reload.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from whale.store import atomic_write_bytes


@dataclass
class TrainExample:
    """One sequence; mask[i] == 1 marks token i as a training target (model-generated tokens only)."""

    ids: list[int]
    mask: list[int]


@dataclass
class TrainerConfig:
    lora: bool = True
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_targets: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    lr: float = 5e-4
    weight_decay: float = 0.0
    minibatch: int = 32  # examples per optimizer step
    micro_batch: int = 16  # examples per forward pass (gradient accumulation inside a minibatch)
    epochs: int = 1
    max_grad_norm: float = 1.0
    # compute dtype of forward/backward: bfloat16 runs under torch.autocast (weights, optimizer state and
    # the loss stay fp32); see whale.model.fast_engine.pick_dtype for how "auto" is resolved upstream
    dtype: str = "float32"


def target_logprobs(
    model: Any, batch: list[TrainExample], pad_id: int, temperature: float = 1.0
) -> list[torch.Tensor]:
    """Per example, log p(token) of each masked target token, in order (1-D, differentiable).

    Computed as log_softmax(logits / temperature), the same quantity the engine records in
    `Generation.logprobs`; every loss (SFT, DPO, GRPO) is built on this one function. The LM head runs
    only at positions where some row has a target: prompt positions need no vocabulary-wide logits, and
    for a 135M model the head is a fifth of the FLOPs and most of the activation memory.
    """
    width = max(len(e.ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    target_mask = torch.zeros((len(batch), width), dtype=torch.bool)
    for row, e in enumerate(batch):
        ids[row, : len(e.ids)] = torch.tensor(e.ids)
        attn[row, : len(e.ids)] = 1
        target_mask[row, : len(e.mask)] = torch.tensor(e.mask, dtype=torch.bool)
    keep = target_mask[:, 1:]  # position t predicts token t + 1
    # Through the model's own forward (FSDP's hooks live there), asking for logits only at positions where
    # some row has a target: HF causal LMs take a tensor of positions as `logits_to_keep`.
    positions = keep.any(0).nonzero().squeeze(-1)
    logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=positions).logits
    chosen = keep[:, positions]
    logits = logits[chosen].float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    targets = ids[:, 1:][:, positions][chosen]
    logp = torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)
    return list(torch.split(logp, keep.sum(1).tolist()))


def token_nll(model: Any, batch: list[TrainExample], pad_id: int) -> tuple[torch.Tensor, int]:
    """Summed NLL over masked target tokens of a batch, and the number of those tokens."""
    per_example = target_logprobs(model, batch, pad_id)
    count = sum(len(t) for t in per_example)
    return -torch.cat(per_example).sum(), count


def with_lora(model: Any, config: TrainerConfig) -> Any:
    """`model` wrapped with the LoRA adapters the trainer trains (the targets it has, of config's list)."""
    from peft import LoraConfig, get_peft_model

    targets = [t for t in config.lora_targets if any(n.endswith(t) for n, _ in model.named_modules())]
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def load_trainable(model: Any, folder: Path) -> None:
    """Load a checkpoint's trainable weights (see Trainer.save) into `model`, built as the trainer built it;
    a checkpoint missing any of them is refused rather than silently half-loaded."""
    from safetensors.torch import load_file

    state = load_file(str(folder / "weights.safetensors"))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    missing = trainable - set(state)
    if missing:
        raise ValueError(
            f"{folder}: checkpoint lacks {len(missing)} trainable tensors (e.g. {sorted(missing)[0]})"
        )
    model.load_state_dict(state, strict=False)


class Trainer:
    def __init__(self, model: Any, pad_id: int, config: TrainerConfig, seed: int = 0):
        self.config = config
        self.pad_id = pad_id
        self.rng = random.Random(seed)
        self.model = with_lora(model, config) if config.lora else model
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        self.steps = 0

    def optimizer_steps_for(self, n_examples: int) -> int:
        """How many optimizer steps `train` takes on this many examples (for progress bars)."""
        return self.config.epochs * -(-n_examples // self.config.minibatch)

    def train(
        self, examples: list[TrainExample], on_step: Callable[[], None] | None = None
    ) -> dict[str, float]:
        """One pass (config.epochs) over `examples`; token-mean NLL per minibatch, one optimizer step each."""
        if not examples:
            return {"loss": float("nan"), "tokens": 0, "optimizer_steps": 0}
        cfg = self.config
        self.model.train()
        total_loss, total_tokens, opt_steps = 0.0, 0, 0
        for _ in range(cfg.epochs):
            order = list(examples)
            self.rng.shuffle(order)
            for start in range(0, len(order), cfg.minibatch):
                minibatch = sorted(order[start : start + cfg.minibatch], key=lambda e: len(e.ids))
                n_tokens = sum(sum(e.mask[1:]) for e in minibatch)
                if n_tokens == 0:
                    continue
                self.optimizer.zero_grad(set_to_none=True)
                for m in range(0, len(minibatch), cfg.micro_batch):
                    with self._autocast():
                        nll, count = token_nll(self.model, minibatch[m : m + cfg.micro_batch], self.pad_id)
                    (nll / n_tokens).backward()
                    total_loss += nll.item()
                    total_tokens += count
                torch.nn.utils.clip_grad_norm_(
                    [p for p in self.model.parameters() if p.requires_grad], cfg.max_grad_norm
                )
                self.optimizer.step()
                opt_steps += 1
                if on_step is not None:
                    on_step()
        self.steps += opt_steps
        self.model.eval()
        return {
            "loss": total_loss / max(total_tokens, 1),
            "tokens": total_tokens,
            "optimizer_steps": opt_steps,
        }

    def _autocast(self) -> torch.autocast:
        device = next(self.model.parameters()).device.type
        return torch.autocast(device, dtype=torch.bfloat16, enabled=self.config.dtype == "bfloat16")

    @torch.no_grad()
    def mean_nll(self, examples: list[TrainExample]) -> float:
        self.model.eval()
        with self._autocast():
            nll, count = token_nll(self.model, examples, self.pad_id)
        return nll.item() / max(count, 1)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        names = {n for n, p in self.model.named_parameters() if p.requires_grad}
        return {n: t.detach().clone() for n, t in self.model.state_dict().items() if n in names}

    def save(self, folder: Path) -> None:
        """Trainable weights (the adapter under LoRA) and optimizer state: enough to resume exactly."""
        from safetensors.torch import save

        weights = save({k: v.contiguous() for k, v in self.trainable_state().items()})
        optimizer = io.BytesIO()
        torch.save({"optimizer": self.optimizer.state_dict(), "steps": self.steps}, optimizer)
        # through the store: a full disk is an OSError naming the file, not a torch serializer error
        atomic_write_bytes(folder / "weights.safetensors", weights)
        atomic_write_bytes(folder / "optimizer.pt", optimizer.getvalue())

    def load(self, folder: Path) -> None:
        load_trainable(self.model, folder)
        extra = torch.load(folder / "optimizer.pt", weights_only=True)
        self.optimizer.load_state_dict(extra["optimizer"])
        self.steps = int(extra["steps"])

    def close(self) -> None:
        """Nothing to release in one process (DistributedTrainer stops its rank processes here)."""
