"""Rollouts as training sequences: every train=True model call as (prompt + completion ids, mask on the
completion), and the grouping (one task's rollouts under one harness) the algorithms compare within."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from whale.harness.records import ModelCall, Rollout
from whale.model.trainer import TrainExample


def trainable(rollout: Rollout) -> list[ModelCall]:
    return [c for c in rollout.calls if c.train and c.completion_ids]


def call_example(call: ModelCall, **fields: Any) -> TrainExample:
    """A model call as (prompt + completion ids, mask on the completion), with the loss's extra fields."""
    ids = call.prompt_ids + call.completion_ids
    return TrainExample(ids, [0] * len(call.prompt_ids) + [1] * len(call.completion_ids), **fields)


def call_examples(rollout: Rollout, **fields: Any) -> list[TrainExample]:
    """Every train=True model call of a rollout as a training sequence."""
    return [call_example(c, **fields) for c in trainable(rollout)]


def passed(rollout: Rollout, threshold: float) -> bool:
    return rollout.error is None and rollout.reward >= threshold


def groups_of(rollouts: list[Rollout]) -> dict[tuple[str, str], list[Rollout]]:
    """Rollouts by (task, harness), in sample order: the rollouts whose rewards are comparable."""
    groups: dict[tuple[str, str], list[Rollout]] = defaultdict(list)
    for r in rollouts:
        groups[(r.task_id, r.harness_id)].append(r)
    return groups


def drop_uniform(rollouts: list[Rollout], threshold: float) -> tuple[list[Rollout], int]:
    """The rollouts of groups with both passing and failing members, and how many groups were dropped."""
    keep, dropped = [], 0
    for group in groups_of(rollouts).values():
        if len({passed(r, threshold) for r in group}) == 2:
            keep += group
        else:
            dropped += 1
    return keep, dropped
