"""Rejection sampling: the rollouts that pass the reward threshold become SFT targets (at most a few per
task)."""

from __future__ import annotations

from collections import defaultdict

from whale.harness.records import Rollout
from whale.weights.examples import passed


def select_kept(rollouts: list[Rollout], threshold: float, max_per_task: int) -> list[Rollout]:
    per_task: dict[str, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        if passed(r, threshold) and len(per_task[r.task_id]) < max_per_task:
            per_task[r.task_id].append(r)
    return [r for group in per_task.values() for r in group]
