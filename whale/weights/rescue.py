"""Rescue: training signal for the tasks whose k rollouts under the incumbent all failed.

Rejection sampling learns nothing from such a task. P2O (arXiv 2603.21877) runs the hard tasks under
other prompts and distills what passes into the weights under the original one. Here a weight step
runs each zero-signal task again under up to R other harnesses (the run picks them: whale/run/
rescue_pool.py), `k` rollouts each, charged to the budget like the step's own. What passes becomes
examples:

    on_policy   the rescue harness's own credited calls, as sampled (its prompt and its reply)
    distill     the incumbent's answering prompt with the rescued reply as the target (context
                distillation): the model learns the answer under the harness it is evaluated with

A distill example is built from the task's first incumbent rollout and one passing rescue rollout. It
is skipped, and counted by reason, when it is not well defined:

    several calls     the incumbent's trainable calls are not all on one conversation: its answering
                      prompt holds the model's own earlier replies, which the rescued reply never saw
    no call           the incumbent's rollout made no trainable model call
    not in reply      the rescued answer's words are not in the rescue's last credited reply (a tool
                      computed the answer from it, or the harness mapped an index onto an option)
    too long          the reply is longer than the incumbent call's max_tokens
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from whale.harness.calls import RolloutJob
from whale.harness.records import HarnessCandidate, ModelCall, Rollout
from whale.harness.task import Task
from whale.model.trainer import TrainExample
from whale.weights.examples import passed, same_turns, trainable, words

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


def answering_call(rollout: Rollout) -> ModelCall | str:
    """The incumbent's answering call (its last trainable one), or why there is none to distill into."""
    calls = [c for c in rollout.calls if c.train and c.completion_ids]
    if not calls:
        return "no call"
    if any(not same_turns(c.messages, calls[-1].messages) for c in calls):
        return "several calls"
    return calls[-1]


def distill_example(incumbent: Rollout, rescued: Rollout) -> TrainExample | str:
    """The incumbent's answering prompt with the rescued reply as target, or why it is skipped."""
    call = answering_call(incumbent)
    if isinstance(call, str):
        return call
    credited = trainable(rescued)
    said = words(rescued.answer or "")
    found = credited and said and re.search(rf"(?<!\w){re.escape(said)}(?!\w)", words(credited[-1].text))
    if not found:
        return "not in reply"
    reply = credited[-1].completion_ids
    if len(reply) > int(call.params.get("max_tokens") or len(reply)):
        return "too long"
    return TrainExample(call.prompt_ids + reply, [0] * len(call.prompt_ids) + [1] * len(reply))


def distill_examples(
    incumbent: list[Rollout], rescue: list[Rollout], threshold: float, max_per_task: int
) -> tuple[list[tuple[Rollout, TrainExample]], Counter[str]]:
    """Up to `max_per_task` distilled examples per rescued task, each with the rescue rollout it came
    from, and the passing rescue rollouts skipped, by reason."""
    first = {}
    for r in incumbent:
        first.setdefault(r.task_id, r)
    out: list[tuple[Rollout, TrainExample]] = []
    skipped: Counter[str] = Counter()
    per_task: Counter[str] = Counter()
    for r in rescue:
        if not passed(r, threshold) or per_task[r.task_id] >= max_per_task:
            continue
        example = distill_example(first[r.task_id], r)
        if isinstance(example, str):
            skipped[example] += 1
            continue
        per_task[r.task_id] += 1
        out.append((r, example))
    return out, skipped


def rescue_report(
    mode: str, zero: list[str], rescue: list[Rollout], threshold: float, examples: int, skipped: Counter[str]
) -> RescueReport:
    rescued: dict[str, set[str]] = {}
    for r in rescue:
        if passed(r, threshold):
            rescued.setdefault(r.harness_id, set()).add(r.task_id)
    tasks = set().union(*rescued.values()) if rescued else set()
    return RescueReport(
        mode, len(zero), len({r.task_id for r in rescue}), len(tasks),
        {h: len(t) for h, t in sorted(rescued.items())}, len(rescue), examples, dict(skipped),
    )  # fmt: skip


def mark(rescue: list[Rollout], incumbent_of: dict[str, str], mode: str, trained: set[int]) -> None:
    """Mark every rescue rollout for rollouts/train.jsonl: the incumbent it stood in for, and whether
    it became training examples (`trained` holds the ids of those rollouts)."""
    for r in rescue:
        r.rescue = {"for": incumbent_of[r.task_id], "mode": mode, "trained": id(r) in trained}
