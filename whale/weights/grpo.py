"""GRPO: every rollout weighted by its reward minus its group's mean (optionally divided by the group's
standard deviation), with the sampling log-probs the clipped ratio needs."""

from __future__ import annotations

import statistics

from whale.harness.records import Rollout
from whale.model.trainer import TrainExample
from whale.weights.examples import call_example, groups_of, trainable


def group_advantages(rewards: list[float], std_normalize: bool = True) -> list[float]:
    """Reward minus the group mean, divided by the group's (population) standard deviation if asked;
    a group whose rewards are all equal gets zeros."""
    mean = sum(rewards) / len(rewards)
    centred = [r - mean for r in rewards]
    std = statistics.pstdev(rewards)
    if not std_normalize:
        return centred
    return [c / std if std > 1e-8 else 0.0 for c in centred]


def grpo_contributions(
    rollouts: list[Rollout], std_normalize: bool
) -> list[tuple[Rollout, list[TrainExample], float]]:
    """Every rollout with trainable calls, its sequences carrying its advantage and sampling log-probs."""
    out = []
    for group in groups_of(rollouts).values():
        for r, advantage in zip(
            group, group_advantages([r.reward for r in group], std_normalize), strict=True
        ):
            calls = trainable(r)
            if any(c.logprobs is None or len(c.logprobs) != len(c.completion_ids) for c in calls):
                raise ValueError(
                    f"grpo: rollout {r.task_id}/{r.sample} has a model call without sampling log-probs "
                    "for every token (the engine must record them when a request asks)"
                )
            examples = [
                call_example(
                    c, temperature=float(c.params.get("temperature", 1.0)), advantage=advantage,
                    old_logprobs=list(c.logprobs),
                )
                for c in calls
            ]  # fmt: skip
            if examples:
                out.append((r, examples, advantage))
    return out
