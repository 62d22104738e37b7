"""One online rejection-sampling fine-tuning step under a frozen harness (or, for Fast-Slow, a frozen
population of harnesses, one drawn per task).

Sample tasks, run k rollouts each through the current harness, keep those whose reward passes the
threshold, and take SFT steps on the `train=True` model calls inside them: exact sampled token ids,
loss on completion tokens only.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from whale.domains.base import Task
from whale.executor import Executor
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.runner import RolloutJob
from whale.model.trainer import Trainer, TrainExample


@dataclass
class RFTStepResult:
    rollouts: list[Rollout]
    harnesses: dict[str, int]  # harness id -> tasks it ran
    kept: int
    examples: int
    train_reward: float
    loss: float
    optimizer_steps: int


def examples_from(rollouts: list[Rollout]) -> list[TrainExample]:
    """Every train=True model call becomes (prompt + completion ids, mask on the completion)."""
    out = []
    for r in rollouts:
        for c in r.calls:
            if c.train and c.completion_ids:
                out.append(
                    TrainExample(
                        c.prompt_ids + c.completion_ids, [0] * len(c.prompt_ids) + [1] * len(c.completion_ids)
                    )
                )
        # fmt: skip
    return out


def select_kept(rollouts: list[Rollout], threshold: float, max_per_task: int) -> list[Rollout]:
    per_task: dict[str, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        if r.error is None and r.reward >= threshold and len(per_task[r.task_id]) < max_per_task:
            per_task[r.task_id].append(r)
    return [r for group in per_task.values() for r in group]


def sample(
    runner: Executor,
    harnesses: list[HarnessCandidate],
    train_tasks: list[Task],
    rng: random.Random,
    tasks_per_step: int,
    k: int,
    salt: str = "",
    on_done: Callable[[Rollout], None] | None = None,
) -> tuple[list[Rollout], dict[str, int]]:
    """k rollouts on each of `tasks_per_step` drawn tasks; each task's harness drawn from `harnesses`.
    Returns the rollouts and how many tasks each harness ran."""
    tasks = rng.sample(train_tasks, min(tasks_per_step, len(train_tasks)))
    chosen = [harnesses[0] if len(harnesses) == 1 else rng.choice(harnesses) for _ in tasks]
    jobs = [RolloutJob(t, h, s, salt) for t, h in zip(tasks, chosen, strict=True) for s in range(k)]
    return runner.run(jobs, on_done), dict(Counter(h.id for h in chosen))


def train_on(
    trainer: Trainer,
    rollouts: list[Rollout],
    harnesses: dict[str, int],
    threshold: float,
    max_kept_per_task: int,
    on_step: Callable[[], None] | None = None,
) -> RFTStepResult:
    """Keep the rollouts that pass, and take SFT steps on their trainable calls."""
    kept = select_kept(rollouts, threshold, max_kept_per_task)
    examples = examples_from(kept)
    stats = trainer.train(examples, on_step)
    return RFTStepResult(
        rollouts=rollouts,
        harnesses=harnesses,
        kept=len(kept),
        examples=len(examples),
        train_reward=sum(r.reward for r in rollouts) / max(len(rollouts), 1),
        loss=stats["loss"],
        optimizer_steps=int(stats["optimizer_steps"]),
    )
