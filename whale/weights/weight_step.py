"""One online weight step under a frozen harness (or, for Fast-Slow, a frozen population of harnesses,
one drawn per task): sample, turn the rollouts into training examples, train.

`weight_step` is the whole step: `sample` runs k rollouts on each drawn task; `build_batch` turns them
into examples for the configured algorithm, always on the `train=True` model calls and their exact
sampled token ids (loss on completion tokens only); `train_on` takes the optimizer steps.

    rft    (rft.py) the rollouts that pass the reward threshold, as SFT targets
    dpo    (dpo.py) pairs of a passing and a failing rollout of the same task under the same harness
    grpo   (grpo.py) every rollout, weighted by its reward minus its group's mean (a group: one task's k
           rollouts under one harness), optionally divided by the group's standard deviation

A rollout with several trainable calls gives one sequence per call, all sharing its advantage or pair
side. Groups whose rollouts all pass or all fail can be dropped: GRPO gets no signal from them, and for
RFT an all-pass task is one the model already solves. Tasks whose rollouts all failed can be rescued
under other harnesses (rescue.py).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from whale.core.config import Config, WeightsConfig
from whale.core.progress import Bars
from whale.core.timing import timed, unit
from whale.harness.calls import RolloutJob
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.task import Task
from whale.model.losses import Objective
from whale.model.trainer import Trainer, TrainExample, training_units
from whale.rollout.executor import Executor
from whale.weights.distill import Distilled, Encode, distill
from whale.weights.dpo import dpo_contributions
from whale.weights.examples import call_examples, drop_uniform
from whale.weights.grpo import grpo_contributions
from whale.weights.rescue import (
    RescuePool,
    RescueReport,
    RescueSettings,
    mark,
    plan_rescue,
    rescue_report,
)
from whale.weights.rft import select_kept

LOSS_OF = {"rft": "sft", "dpo": "dpo", "grpo": "grpo"}  # weights.algorithm -> Objective.kind


@dataclass(frozen=True)
class WeightSettings:
    """Everything one weight step needs from the config (weights.* and rft.*)."""

    algorithm: str  # rft, dpo or grpo
    tasks_per_step: int
    k: int  # rollouts per task
    threshold: float  # a rollout passes at or above this reward
    max_kept_per_task: int
    drop_uniform_groups: bool
    std_normalize: bool
    objective: Objective
    rescue: RescueSettings = RescueSettings()
    encode: Encode | None = None  # the tokenizer, for distill targets built from the answer

    @classmethod
    def from_config(cls, cfg: Config, encode: Encode | None = None) -> WeightSettings:
        w, r = cfg.weights, cfg.rft
        objective = Objective(LOSS_OF[w.algorithm], w.dpo_beta, w.grpo_clip, w.kl_coef)
        rescue = RescueSettings(w.rescue, w.rescue_harnesses, w.rescue_k)
        return cls(
            w.algorithm, r.tasks_per_step, r.k, r.reward_threshold, r.max_kept_per_task,
            w.drop_uniform_groups, w.grpo_std_normalize, objective, rescue, encode,
        )  # fmt: skip


@dataclass
class WeightBatch:
    """What one weight step trains on, and where it came from."""

    examples: list[TrainExample]
    kept: int  # rollouts whose calls became training examples
    dropped_tasks: int = 0  # groups left out because their rollouts all passed or all failed
    by_harness: dict[str, int] = field(default_factory=dict)  # harness id -> training examples
    mean_abs_advantage: float | None = None  # grpo: mean |advantage| over the rollouts trained on
    sources: list[Rollout] = field(default_factory=list)  # the rollouts the examples came from


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
    rescue: RescueReport | None = None


def step_line(result: WeightStepResult, served: str) -> str:
    """What a weight step did, in one console line (`served`: the weights version after it)."""
    measured = [("KL", result.kl), ("margin", result.margin), ("|A|", result.mean_abs_advantage)]
    extra = "".join(f", {name} {value:.4f}" for name, value in measured if value is not None)
    trained = f"loss {result.loss:.3f}{extra}" if result.optimizer_steps else f"no update: {served} stays"
    rescue, saved = result.rescue, ""
    if rescue is not None:
        saved = (
            f", rescued {rescue.rescued}/{rescue.zero_signal} zero-signal tasks ({rescue.tried} tried,"
            f" {rescue.rollouts} rollouts, {rescue.examples} examples)"
        )
    kept = f"kept {result.kept}/{len(result.rollouts)}"
    return f"train reward {result.train_reward:.3f}, {kept}{saved}, {trained}"


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
        sources=[r for r, _ in used],
    )


def merged(a: WeightBatch, b: WeightBatch) -> WeightBatch:
    """Both batches as one; b's DPO pair ids are moved past a's."""
    shift = 1 + max((e.pair for e in a.examples), default=-1)
    for e in b.examples:
        e.pair += shift if e.pair >= 0 else 0
    advantage = [(x.mean_abs_advantage, x.kept) for x in (a, b) if x.mean_abs_advantage is not None]
    return WeightBatch(
        a.examples + b.examples,
        a.kept + b.kept,
        a.dropped_tasks + b.dropped_tasks,
        dict(Counter(a.by_harness) + Counter(b.by_harness)),
        sum(m * n for m, n in advantage) / max(sum(n for _, n in advantage), 1) if advantage else None,
        a.sources + b.sources,
    )


def rescue_batch(
    runner: Executor,
    incumbent: list[Rollout],
    rescue: list[Rollout],
    harnesses: list[HarnessCandidate],
    train_tasks: list[Task],
    settings: WeightSettings,
) -> tuple[WeightBatch, Distilled]:
    """What the rescue rollouts train: their own calls (on_policy) or the incumbent's prompts with targets
    a replay of the incumbent confirmed (distill, attributed to the incumbent harness)."""
    if settings.rescue.mode == "on_policy":
        batch = build_batch(
            rescue, settings.algorithm, settings.threshold, settings.max_kept_per_task,
            settings.drop_uniform_groups, settings.std_normalize,
        )  # fmt: skip
        return batch, Distilled()
    found = distill(
        runner, incumbent, rescue, {h.id: h for h in harnesses}, {t.id: t for t in train_tasks},
        settings.threshold, settings.max_kept_per_task, settings.encode,
    )  # fmt: skip
    harness_of = {r.task_id: r.harness_id for r in incumbent}
    by_harness = Counter(harness_of[r.task_id] for r, _ in found.pairs)
    examples, sources = [e for _, e in found.pairs], [r for r, _ in found.pairs]
    return WeightBatch(examples, len(found.pairs), 0, dict(by_harness), None, sources), found


def sample(
    runner: Executor,
    harnesses: list[HarnessCandidate],
    train_tasks: list[Task],
    rng: random.Random,
    settings: WeightSettings,
    salt: str = "",
    on_done: Callable[[Rollout], None] | None = None,
) -> tuple[list[Rollout], dict[str, int]]:
    """k rollouts on each of `tasks_per_step` drawn tasks; each task's harness drawn from `harnesses`.
    Returns the rollouts and how many tasks each harness ran. GRPO records sampling log-probs."""
    tasks = rng.sample(train_tasks, min(settings.tasks_per_step, len(train_tasks)))
    chosen = [harnesses[0] if len(harnesses) == 1 else rng.choice(harnesses) for _ in tasks]
    logprobs = settings.algorithm == "grpo"
    jobs = [
        RolloutJob(t, h, s, salt, logprobs=logprobs)
        for t, h in zip(tasks, chosen, strict=True)
        for s in range(settings.k)
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


def needs_reference(w: WeightsConfig) -> bool:
    """DPO's loss and GRPO's KL penalty need the phase-start weights; otherwise the KL to them is only
    logged on request (`weights.log_kl`), since it costs a no-grad pass over every step's examples."""
    return w.algorithm == "dpo" or w.kl_coef > 0 or w.log_kl


@unit("weight steps")
def weight_step(
    runner: Executor,
    trainer: Trainer,
    harnesses: list[HarnessCandidate],
    train_tasks: list[Task],
    settings: WeightSettings,
    rng: random.Random,
    salt: str,
    bars: Bars,
    label: str,
    rescue_pool: RescuePool | None = None,
    budget: int | None = None,
    before_spending: Callable[[int], None] | None = None,
) -> WeightStepResult:
    """One weight step: sample under `harnesses`, rescue the tasks that all failed under other harnesses
    (`rescue_pool`, within `budget` rollouts in all), build the algorithm's batch, take the optimizer
    steps. `before_spending` hears the rollouts the step will spend before it spends more than its
    sampling, and before it trains (the run takes the evaluation points the step passes there)."""
    with bars(f"{label}: sampling", settings.tasks_per_step * settings.k) as tick:
        rollouts, used = sample(runner, harnesses, train_tasks, rng, settings, salt, tick)
    mode, zero, jobs = settings.rescue.mode, [], []
    if mode != "off" and rescue_pool is not None:
        left = (len(rollouts) if budget is None else budget) - len(rollouts)
        zero, jobs = plan_rescue(
            rollouts, train_tasks, rescue_pool, settings.rescue, settings.threshold,
            salt=f"{salt}-rescue", logprobs=settings.algorithm == "grpo", budget=left,
        )  # fmt: skip
    if before_spending is not None:
        before_spending(len(rollouts) + len(jobs))
    rescue: list[Rollout] = []
    if jobs:
        with bars(f"{label}: rescue", len(jobs)) as tick:
            rescue = runner.run(jobs, tick)
    batch = build_batch(
        rollouts, settings.algorithm, settings.threshold, settings.max_kept_per_task,
        settings.drop_uniform_groups, settings.std_normalize,
    )  # fmt: skip
    report = None
    if mode != "off":
        extra, found = rescue_batch(runner, rollouts, rescue, harnesses, train_tasks, settings)
        batch = merged(batch, extra)
        mark(rescue, {r.task_id: r.harness_id for r in rollouts}, mode, {id(r) for r in extra.sources})
        report = rescue_report(
            mode, zero, rescue, settings.threshold, len(extra.examples), found.skipped, found.targets,
            found.replays,
        )  # fmt: skip
    n = trainer.optimizer_steps_for(len(training_units(batch.examples)))
    with bars(f"{label}: training", n) as tick, timed("trainer"):
        result = train_on(trainer, rollouts, used, batch, settings.objective, tick)
    result.rollouts, result.rescue = rollouts + rescue, report
    return result
