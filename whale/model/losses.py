"""The weight-phase losses, as pure functions on per-token log-probabilities.

Every tensor here is what `whale.model.trainer.target_logprobs` returns for one sequence (log p of each
model-generated token, in order) or a sum of it, so all three algorithms share one notion of "the
model's probability of what it said". The trainer sums these over a micro-batch and divides by the
minibatch's count (tokens for SFT and GRPO, pairs for DPO).

    sft    -sum log p(token)                                   (rejection-sampling fine-tuning)
    dpo    -log sigmoid(beta * margin) per pair, margin = (log pi - log ref)(chosen) - (...)(rejected)
    grpo   -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A) per token, ratio = pi / pi_sampling
    kl     exp(d) - d - 1 per token, d = log ref - log pi (the "k3" estimate of KL(pi || ref))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Objective:
    """Which loss the trainer minimises, with its knobs."""

    kind: Literal["sft", "dpo", "grpo"] = "sft"
    beta: float = 0.1  # dpo: strength of the implicit KL to the reference
    clip_eps: float = 0.2  # grpo: the trust region of the importance ratio
    kl_coef: float = 0.0  # grpo: weight of the per-token KL penalty to the reference

    @property
    def needs_reference(self) -> bool:
        return self.kind == "dpo" or (self.kind == "grpo" and self.kl_coef > 0)


SFT = Objective()


def sft_loss(logps: list[torch.Tensor]) -> torch.Tensor:
    """Summed negative log-likelihood of every target token."""
    return -torch.cat(logps).sum()


def dpo_loss(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per pair, the DPO loss and the implicit reward margin beta * margin (detached).

    Inputs are sequence log-probabilities (sums over a side's target tokens), one entry per pair.
    """
    margin = (chosen - ref_chosen) - (rejected - ref_rejected)
    return -F.logsigmoid(beta * margin), (beta * margin).detach()


def grpo_loss(
    logps: torch.Tensor, old_logps: torch.Tensor, advantage: torch.Tensor | float, clip_eps: float
) -> torch.Tensor:
    """Per token, the clipped policy-gradient surrogate (to minimise) of PPO/GRPO.

    `old_logps` are the sampling log-probabilities the engine recorded, so the first step on fresh
    rollouts has ratio 1 and later minibatches of the same rollouts are held in the trust region.
    """
    ratio = torch.exp(logps - old_logps)
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)
    return -torch.minimum(ratio * advantage, clipped * advantage)


def kl_estimate(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Per token, exp(d) - d - 1 with d = log ref - log pi: non-negative, and its mean over tokens
    sampled from pi is an unbiased estimate of KL(pi || ref) (Schulman's k3)."""
    d = ref_logps - logps
    return torch.exp(d) - d - 1.0
