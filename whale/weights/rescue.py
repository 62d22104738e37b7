"""Rescue: training signal for the tasks whose k rollouts under the incumbent all failed.

Rejection sampling learns nothing from such a task. P2O (arXiv 2603.21877) runs the hard tasks under
other prompts and distills what passes into the weights under the original one. Here a weight step
runs each zero-signal task again under up to R other harnesses (the run picks them: whale/run/
rescue_pool.py), `k` rollouts each, charged to the budget like the step's own. What passes becomes
examples:

    on_policy   the rescue harness's own credited calls, as sampled (its prompt and its reply)
    distill     the incumbent's answering prompt with a target that gives the rescued answer (context
                distillation), confirmed by replaying the incumbent harness (distill.py): the model
                learns the answer under the harness it is evaluated with
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from whale.harness.calls import RolloutJob
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.task import Task
from whale.weights.examples import passed

MODES = ("off", "on_policy", "distill")

# The failed rollouts of the zero-signal tasks -> the harnesses to run them under, best first.
RescuePool = Callable[[list[Rollout]], list[HarnessCandidate]]


@dataclass(frozen=True)
class RescueSettings:
    mode: str = "off"  # off, on_policy or distill
    harnesses: int = 2  # R: rescue harnesses per zero-signal task
    k: int = 4  # rollouts per rescue harness and task


@dataclass
class RescueReport:
    """What rescue did in one weight step (the weight_step event's `rescue`)."""

    mode: str
    zero_signal: int  # tasks whose rollouts under the incumbent all failed
    tried: int = 0  # of them, run under rescue harnesses (the budget can cut the rest)
    rescued: int = 0  # of them, passed at least once under a rescue harness
    by_harness: dict[str, int] = field(default_factory=dict)  # harness id -> tasks it rescued
    rollouts: int = 0
    examples: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # distill: reason -> passing rollouts unused
    targets: dict[str, int] = field(default_factory=dict)  # distill: target kind -> examples
    replays: int = 0  # distill: replays of the incumbent run to confirm targets (not charged)


def zero_signal(rollouts: list[Rollout], threshold: float) -> list[str]:
    """The task ids, in sample order, none of whose rollouts passed."""
    seen: dict[str, bool] = {}
    for r in rollouts:
        seen[r.task_id] = seen.get(r.task_id, False) or passed(r, threshold)
    return [task for task, any_passed in seen.items() if not any_passed]


def rescue_jobs(
    tasks: list[Task],
    ran: dict[str, str],
    pool: list[HarnessCandidate],
    settings: RescueSettings,
    salt: str,
    logprobs: bool,
    budget: int,
) -> list[RolloutJob]:
    """`settings.k` rollouts of each task under each of the first R pool harnesses other than the one it
    ran under (`ran`: task id -> harness id); whole tasks, as many as `budget` rollouts pay for."""
    jobs: list[RolloutJob] = []
    samples = range(settings.k)
    for task in tasks:
        harnesses = [h for h in pool if h.id != ran[task.id]][: settings.harnesses]
        batch = [RolloutJob(task, h, s, salt, logprobs=logprobs) for h in harnesses for s in samples]
        if len(jobs) + len(batch) > budget:
            break
        jobs += batch
    return jobs


def plan_rescue(
    rollouts: list[Rollout],
    train_tasks: list[Task],
    pool: RescuePool,
    settings: RescueSettings,
    threshold: float,
    salt: str,
    logprobs: bool,
    budget: int,
) -> tuple[list[str], list[RolloutJob]]:
    """A step's zero-signal tasks and the rescue jobs for them. The pool is asked for its harnesses only
    when there is a task to rescue and `budget` pays for one harness's rollouts of it."""
    zero = zero_signal(rollouts, threshold)
    if not zero or budget < settings.k:
        return zero, []
    failed = [r for r in rollouts if r.task_id in set(zero)]
    tasks = {t.id: t for t in train_tasks}
    ran = {r.task_id: r.harness_id for r in rollouts}
    return zero, rescue_jobs([tasks[t] for t in zero], ran, pool(failed), settings, salt, logprobs, budget)


def rescue_report(
    mode: str,
    zero: list[str],
    rescue: list[Rollout],
    threshold: float,
    examples: int,
    skipped: Counter[str],
    targets: Counter[str] | None = None,
    replays: int = 0,
) -> RescueReport:
    rescued: dict[str, set[str]] = {}
    for r in rescue:
        if passed(r, threshold):
            rescued.setdefault(r.harness_id, set()).add(r.task_id)
    tasks = set().union(*rescued.values()) if rescued else set()
    return RescueReport(
        mode, len(zero), len({r.task_id for r in rescue}), len(tasks),
        {h: len(t) for h, t in sorted(rescued.items())}, len(rescue), examples, dict(skipped),
        dict(targets or {}), replays,
    )  # fmt: skip


def mark(rescue: list[Rollout], incumbent_of: dict[str, str], mode: str, trained: set[int]) -> None:
    """Mark every rescue rollout for rollouts/train.jsonl: the incumbent it stood in for, and whether
    it became training examples (`trained` holds the ids of those rollouts)."""
    for r in rescue:
        r.rescue = {"for": incumbent_of[r.task_id], "mode": mode, "trained": id(r) in trained}
