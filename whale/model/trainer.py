"""Training on exact token sequences with loss masks; LoRA (peft) by default, full fine-tuning as an option.

The loss is SFT (rejection sampling), DPO or GRPO (whale/model/losses.py), all on the same masked target
tokens. DPO and GRPO's KL compare against a frozen reference: a snapshot of the trainable tensors, swapped
in for one no-grad pass per `train` call (under LoRA only the adapter is copied).

The trainer wraps the same model object the engine serves, so an update is visible to the next rollout
without a reload.
"""

from __future__ import annotations

import io
import random
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from whale.core.files import atomic_write_bytes
from whale.model.losses import SFT, Objective, dpo_loss, grpo_loss, kl_estimate, sft_loss


@dataclass
class TrainExample:
    """One sequence; mask[i] == 1 marks token i as a training target (model-generated tokens only)."""

    ids: list[int]
    mask: list[int]
    temperature: float = 1.0  # log-probs are taken at this temperature (GRPO: the sampling one)
    advantage: float = 0.0  # grpo: the rollout's group-relative advantage
    old_logprobs: list[float] | None = None  # grpo: the engine's sampling log-probs of the masked tokens
    pair: int = -1  # dpo: sequences with the same pair id form one preference pair
    chosen: bool = True  # dpo: the sequence belongs to the pair's chosen (kept) rollout
    ref_logprobs: torch.Tensor | None = None  # set by the trainer: the masked tokens under the reference


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
    minibatch: int = 32  # examples (DPO: pairs) per optimizer step
    micro_batch: int = 16  # examples (DPO: pairs) per forward pass (gradient accumulation in a minibatch)
    # and at most this many tokens per forward pass, padding included (a longer unit goes alone): a pass's
    # activations grow with its tokens, and past about 500 on a CPU bigger passes are slower, not faster
    micro_batch_tokens: int = 512
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
    return sft_loss(per_example), count


def example_logprobs(model: Any, batch: list[TrainExample], pad_id: int) -> list[torch.Tensor]:
    """`target_logprobs` of each example at its own temperature (one call per temperature present)."""
    by_temperature: dict[float, list[int]] = defaultdict(list)
    for i, e in enumerate(batch):
        by_temperature[e.temperature].append(i)
    out: list[torch.Tensor] = [torch.empty(0)] * len(batch)
    for temperature, rows in by_temperature.items():
        logps = target_logprobs(model, [batch[i] for i in rows], pad_id, temperature)
        for i, lp in zip(rows, logps, strict=True):
            out[i] = lp
    return out


def training_units(examples: list[TrainExample]) -> list[list[TrainExample]]:
    """What must share a micro-batch: a DPO pair's sequences (one `pair` id), else each example alone."""
    units: list[list[TrainExample]] = []
    pairs: dict[int, list[TrainExample]] = {}
    for e in examples:
        if e.pair < 0:
            units.append([e])
        elif e.pair in pairs:
            pairs[e.pair].append(e)
        else:
            pairs[e.pair] = [e]
            units.append(pairs[e.pair])
    return units


def micro_batches(
    units: list[list[TrainExample]], max_units: int, max_tokens: int
) -> list[list[TrainExample]]:
    """Consecutive units grouped into forward passes of at most `max_units` units and `max_tokens` padded
    tokens (sequences x the longest), never splitting a unit; a unit over the token cap goes alone."""
    out: list[list[TrainExample]] = []
    batch: list[TrainExample] = []
    units_in = 0
    for unit in units:
        grown = batch + unit
        if batch and (units_in == max_units or len(grown) * max(len(e.ids) for e in grown) > max_tokens):
            out.append(batch)
            grown, units_in = list(unit), 0
        batch, units_in = grown, units_in + 1
    if batch:
        out.append(batch)
    return out


def loss_count(objective: Objective, units: list[list[TrainExample]]) -> int:
    """What a minibatch's summed loss is divided by: its target tokens, or for DPO its pairs."""
    if objective.kind == "dpo":
        return len(units)
    return sum(sum(e.mask[1:]) for unit in units for e in unit)


def micro_batch_loss(
    objective: Objective, batch: list[TrainExample], logps: list[torch.Tensor]
) -> tuple[torch.Tensor, dict[str, float]]:
    """The summed loss of one micro-batch, and summed statistics (target tokens, KL to the reference when
    the examples carry reference log-probs, DPO margins)."""
    stats: dict[str, float] = {"tokens": float(sum(len(lp) for lp in logps))}
    refs = [e.ref_logprobs for e in batch]
    if all(r is not None for r in refs):
        stats["kl"] = float(sum(kl_estimate(lp.detach(), r).sum() for lp, r in zip(logps, refs, strict=True)))
    if objective.kind == "sft":
        return sft_loss(logps), stats
    if objective.kind == "grpo":
        per_token = [
            grpo_loss(lp, torch.tensor(e.old_logprobs, dtype=lp.dtype), e.advantage, objective.clip_eps)
            for e, lp in zip(batch, logps, strict=True)
        ]
        if objective.kl_coef > 0:
            per_token = [
                t + objective.kl_coef * kl_estimate(lp, r)
                for t, lp, r in zip(per_token, logps, refs, strict=True)
            ]
        return torch.cat(per_token).sum(), stats
    pair_ids = sorted({e.pair for e in batch})
    slot = torch.tensor([pair_ids.index(e.pair) for e in batch])
    chosen = torch.tensor([e.chosen for e in batch])
    seq = torch.stack([lp.sum() for lp in logps])
    ref = torch.stack([r.sum() for r in refs])
    zeros = torch.zeros(len(pair_ids), dtype=seq.dtype)
    sides = [
        zeros.index_add(0, slot[side], values[side]) for values in (seq, ref) for side in (chosen, ~chosen)
    ]
    losses, margins = dpo_loss(*sides, objective.beta)
    stats["margin"] = float(margins.sum())
    return losses.sum(), stats


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


def checkpoint_weights(model: Any, folder: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's trainable tensors (see Trainer.save) for `model`, built as the trainer built it; a
    checkpoint missing any of them is refused rather than silently half-loaded."""
    from safetensors.torch import load_file

    state = load_file(str(folder / "weights.safetensors"))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    missing = trainable - set(state)
    if missing:
        raise ValueError(
            f"{folder}: checkpoint lacks {len(missing)} trainable tensors (e.g. {sorted(missing)[0]})"
        )
    return state


def load_trainable(model: Any, folder: Path) -> None:
    """Load a checkpoint's trainable weights into `model` (see checkpoint_weights)."""
    model.load_state_dict(checkpoint_weights(model, folder), strict=False)


class Trainer:
    def __init__(self, model: Any, pad_id: int, config: TrainerConfig, seed: int = 0):
        self.config = config
        self.pad_id = pad_id
        self.rng = random.Random(seed)
        self.model = with_lora(model, config) if config.lora else model
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        self.steps = 0
        self.reference: dict[str, torch.Tensor] | None = None  # trainable tensors at the phase start

    def optimizer_steps_for(self, n_units: int) -> int:
        """How many optimizer steps `train` takes on this many training units (for progress bars)."""
        return self.config.epochs * -(-n_units // self.config.minibatch)

    def freeze_reference(self) -> None:
        """Take the current weights as the reference of DPO and of the KL (call at a weight phase start)."""
        self.reference = self.trainable_state()

    def load_reference(self, folder: Path) -> None:
        """The reference from a checkpoint written by `save` (a resumed run's phase-start weights)."""
        self.reference = checkpoint_weights(self.model, folder)

    @contextmanager
    def holding(self, state: dict[str, torch.Tensor]) -> Iterator[None]:
        """Swap `state`'s trainable tensors in (the reference, or an earlier point's weights for the
        cross-evaluation), and the current ones back afterwards, bit for bit."""
        params = dict(self.model.named_parameters())
        current = self.trainable_state()
        with torch.no_grad():
            for name, tensor in state.items():
                params[name].copy_(tensor)
            try:
                yield
            finally:
                for name, tensor in current.items():
                    params[name].copy_(tensor)

    @torch.no_grad()
    def reference_logprobs(self, examples: list[TrainExample]) -> list[torch.Tensor]:
        """Each example's target log-probs under the reference weights (at the example's temperature)."""
        was_training = self.model.training
        self.model.eval()
        out: list[torch.Tensor] = []
        cfg = self.config
        with self.holding(self.reference):
            for batch in micro_batches([[e] for e in examples], cfg.micro_batch, cfg.micro_batch_tokens):
                out += example_logprobs(self.model, batch, self.pad_id)
        self.model.train(was_training)
        return out

    def train(
        self,
        examples: list[TrainExample],
        on_step: Callable[[], None] | None = None,
        loss: Objective = SFT,
    ) -> dict[str, float | None]:
        """One pass (config.epochs) over `examples`, one optimizer step per minibatch of the loss's mean.

        Returns the mean loss (per token; DPO: per pair), the tokens trained on, the optimizer steps, the
        mean per-token KL to the reference and the mean DPO margin. Both are measured on the weights each
        minibatch saw, before its update (no extra forward pass), so the first minibatch after
        `freeze_reference` reads KL 0; KL is None without a reference, margin None for other losses.
        """
        if not examples:
            return {"loss": float("nan"), "tokens": 0, "optimizer_steps": 0, "kl": None, "margin": None}
        cfg = self.config
        if loss.needs_reference and self.reference is None:
            self.freeze_reference()
        if self.reference is not None:
            refs = self.reference_logprobs(examples)
            examples = [replace(e, ref_logprobs=r) for e, r in zip(examples, refs, strict=True)]
        self.model.train()
        total_loss, total_count, opt_steps = 0.0, 0, 0
        sums: dict[str, float] = defaultdict(float)
        for minibatch, count in self.minibatches(examples, loss):
            self.optimizer.zero_grad(set_to_none=True)
            for batch in micro_batches(minibatch, cfg.micro_batch, cfg.micro_batch_tokens):
                with self._autocast():
                    value, stats = micro_batch_loss(
                        loss, batch, example_logprobs(self.model, batch, self.pad_id)
                    )
                (value / count).backward()
                total_loss += value.item()
                for key, v in stats.items():
                    sums[key] += v
            total_count += count
            torch.nn.utils.clip_grad_norm_(
                [p for p in self.model.parameters() if p.requires_grad], cfg.max_grad_norm
            )
            self.optimizer.step()
            opt_steps += 1
            if on_step is not None:
                on_step()
        self.steps += opt_steps
        self.model.eval()
        tokens = int(sums["tokens"])
        return {
            "loss": total_loss / max(total_count, 1),
            "tokens": tokens,
            "optimizer_steps": opt_steps,
            "kl": sums["kl"] / max(tokens, 1) if self.reference is not None else None,
            "margin": sums["margin"] / max(total_count, 1) if loss.kind == "dpo" else None,
        }

    def minibatches(
        self, examples: list[TrainExample], loss: Objective = SFT
    ) -> Iterator[tuple[list[list[TrainExample]], int]]:
        """The optimizer steps of `train`: per epoch, shuffled training units cut into minibatches, each
        sorted by length (so micro-batches pad little), with what its summed loss is divided by; a
        minibatch without a single target token is skipped."""
        cfg = self.config
        for _ in range(cfg.epochs):
            order = training_units(examples)
            self.rng.shuffle(order)
            for start in range(0, len(order), cfg.minibatch):
                minibatch = sorted(
                    order[start : start + cfg.minibatch], key=lambda u: sum(len(e.ids) for e in u)
                )
                if loss_count(SFT, minibatch) > 0:
                    yield minibatch, loss_count(loss, minibatch)

    def _autocast(self) -> torch.autocast:
        device = next(self.model.parameters()).device.type
        return torch.autocast(device, dtype=torch.bfloat16, enabled=self.config.dtype == "bfloat16")

    def trainable_tensors(self) -> dict[str, torch.Tensor]:
        """The live trainable tensors, not copied: for reading them now (a digest, a save)."""
        names = {n for n, p in self.model.named_parameters() if p.requires_grad}
        return {n: t.detach() for n, t in self.model.state_dict().items() if n in names}

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """A copy of the trainable tensors, unchanged by later steps."""
        return {n: t.clone() for n, t in self.trainable_tensors().items()}

    def save(self, folder: Path) -> None:
        """Trainable weights (the adapter under LoRA) and optimizer state: enough to resume exactly."""
        from safetensors.torch import save

        weights = save({k: v.contiguous() for k, v in self.trainable_tensors().items()})
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
