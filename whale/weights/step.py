"""One online weight step under a frozen harness (or, for Fast-Slow, a frozen population of harnesses,
one drawn per task): sample, turn the rollouts into training examples, train.

`sample` runs k rollouts on each drawn task; `build_batch` turns them into examples for the configured
algorithm, always on the `train=True` model calls and their exact sampled token ids (loss on completion
tokens only); `train_on` takes the optimizer steps.

    rft    the rollouts that pass the reward threshold, as SFT targets
    dpo    pairs of a passing and a failing rollout of the same task under the same harness
    grpo   every rollout, weighted by its reward minus its group's mean (a group: one task's k rollouts
           under one harness), optionally divided by the group's standard deviation

A rollout with several trainable calls gives one sequence per call, all sharing its advantage or pair
side. Groups whose rollouts all pass or all fail can be dropped: GRPO gets no signal from them, and for
RFT an all-pass task is one the model already solves.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from whale.harness.calls import RolloutJob
from whale.harness.records import HarnessCandidate, ModelCall, Rollout
from whale.harness.task import Task
from whale.model.losses import Objective
from whale.model.trainer import Trainer, TrainExample
from whale.rollout.executor import Executor

LOSS_OF = {"rft": "sft", "dpo": "dpo", "grpo": "grpo"}  # weights.algorithm -> Objective.kind


@dataclass
class WeightBatch:
    """What one weight step trains on, and where it came from."""

    examples: list[TrainExample]
    kept: int  # rollouts whose calls became training examples
    dropped_tasks: int = 0  # groups left out because their rollouts all passed or all failed
    by_harness: dict[str, int] = field(default_factory=dict)  # harness id -> training examples
    mean_abs_advantage: float | None = None  # grpo: mean |advantage| over the rollouts trained on


@dataclass
class WeightStepResult:
    rollouts: list[Rollout]
    harnesses: dict[str, int]  # harness id -> tasks it ran
    kept: int
    examples: int
    train_reward: float
    loss: float
    optimizer_steps: int
    dropped_tasks: int = 0
    by_harness: dict[str, int] = field(default_factory=dict)
    mean_abs_advantage: float | None = None
    margin: float | None = None  # dpo: mean implicit reward margin, chosen over rejected
    kl: float | None = None  # mean per-token KL to the phase-start weights (None without a reference)


def trainable(rollout: Rollout) -> list[ModelCall]:
    return [c for c in rollout.calls if c.train and c.completion_ids]


def call_example(call: ModelCall, **fields: Any) -> TrainExample:
    """A model call as (prompt + completion ids, mask on the completion), with the loss's extra fields."""
    ids = call.prompt_ids + call.completion_ids
    return TrainExample(ids, [0] * len(call.prompt_ids) + [1] * len(call.completion_ids), **fields)


def call_examples(rollout: Rollout, **fields: Any) -> list[TrainExample]:
    """Every train=True model call of a rollout as a training sequence."""
    return [call_example(c, **fields) for c in trainable(rollout)]


def examples_from(rollouts: list[Rollout]) -> list[TrainExample]:
    return [e for r in rollouts for e in call_examples(r)]


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


def select_kept(rollouts: list[Rollout], threshold: float, max_per_task: int) -> list[Rollout]:
    per_task: dict[str, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        if passed(r, threshold) and len(per_task[r.task_id]) < max_per_task:
            per_task[r.task_id].append(r)
    return [r for group in per_task.values() for r in group]


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


def dpo_contributions(
    rollouts: list[Rollout], threshold: float, max_pairs_per_task: int
) -> list[tuple[Rollout, list[TrainExample]]]:
    """Pairs of a passing and a failing rollout of one task under one harness, matched in sample order;
    each rollout is used at most once."""
    out, pair = [], 0
    for group in groups_of(rollouts).values():
        usable = [r for r in group if trainable(r)]
        chosen = [r for r in usable if passed(r, threshold)]
        rejected = [r for r in usable if not passed(r, threshold)]
        for good, bad in list(zip(chosen, rejected, strict=False))[:max_pairs_per_task]:
            out.append((good, call_examples(good, pair=pair, chosen=True)))
            out.append((bad, call_examples(bad, pair=pair, chosen=False)))
            pair += 1
    return out


def build_batch(
    rollouts: list[Rollout],
    algorithm: str,
    threshold: float,
    max_per_task: int,
    drop_uniform_groups: bool = False,
    std_normalize: bool = True,
) -> WeightBatch:
    """The training examples of one weight step, for `algorithm` (rft, dpo or grpo)."""
    dropped = 0
    if drop_uniform_groups:
        rollouts, dropped = drop_uniform(rollouts, threshold)
    advantages = None
    if algorithm == "rft":
        used = [(r, call_examples(r)) for r in select_kept(rollouts, threshold, max_per_task)]
    elif algorithm == "dpo":
        used = dpo_contributions(rollouts, threshold, max_per_task)
    elif algorithm == "grpo":
        with_advantage = grpo_contributions(rollouts, std_normalize)
        used = [(r, examples) for r, examples, _ in with_advantage]
        advantages = [abs(a) for _, _, a in with_advantage]
    else:
        raise ValueError(f"unknown weight algorithm {algorithm!r} (known: {', '.join(LOSS_OF)})")
    by_harness: Counter[str] = Counter()
    for r, examples in used:
        by_harness[r.harness_id] += len(examples)
    return WeightBatch(
        examples=[e for _, examples in used for e in examples],
        kept=len(used),
        dropped_tasks=dropped,
        by_harness=dict(by_harness),
        mean_abs_advantage=sum(advantages) / len(advantages) if advantages else None,
    )


def sample(
    runner: Executor,
    harnesses: list[HarnessCandidate],
    train_tasks: list[Task],
    rng: random.Random,
    tasks_per_step: int,
    k: int,
    salt: str = "",
    on_done: Callable[[Rollout], None] | None = None,
    logprobs: bool = False,
) -> tuple[list[Rollout], dict[str, int]]:
    """k rollouts on each of `tasks_per_step` drawn tasks; each task's harness drawn from `harnesses`.
    Returns the rollouts and how many tasks each harness ran. `logprobs` records sampling log-probs."""
    tasks = rng.sample(train_tasks, min(tasks_per_step, len(train_tasks)))
    chosen = [harnesses[0] if len(harnesses) == 1 else rng.choice(harnesses) for _ in tasks]
    jobs = [
        RolloutJob(t, h, s, salt, logprobs=logprobs)
        for t, h in zip(tasks, chosen, strict=True)
        for s in range(k)
    ]
    return runner.run(jobs, on_done), dict(Counter(h.id for h in chosen))


def train_on(
    trainer: Trainer,
    rollouts: list[Rollout],
    harnesses: dict[str, int],
    batch: WeightBatch,
    objective: Objective,
    on_step: Callable[[], None] | None = None,
) -> WeightStepResult:
    """Take the optimizer steps of one weight step on `batch` (built from `rollouts`)."""
    stats = trainer.train(batch.examples, on_step, objective)
    return WeightStepResult(
        rollouts=rollouts,
        harnesses=harnesses,
        kept=batch.kept,
        examples=len(batch.examples),
        train_reward=sum(r.reward for r in rollouts) / max(len(rollouts), 1),
        loss=stats["loss"],
        optimizer_steps=int(stats["optimizer_steps"]),
        dropped_tasks=batch.dropped_tasks,
        by_harness=batch.by_harness,
        mean_abs_advantage=batch.mean_abs_advantage,
        margin=stats["margin"],
        kl=stats["kl"],
    )
