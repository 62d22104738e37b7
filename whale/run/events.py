"""Every record of a run's events.jsonl, defined once.

The experiment writes these; `whale compare` and `whale results` keep `summary_fields` of the unit events
in their summaries; the report and `whale status` read them back as plain JSON. Units (weight steps,
search iterations, re-evaluations, phase switches) are stamped with the unit index, budget rollouts and
wall time when written (`stamped`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from whale.core.timing import snapshot
from whale.weights.weight_step import WeightStepResult


@dataclass
class Event:
    kind: ClassVar[str]
    summary_fields: ClassVar[tuple[str, ...]] = ()  # what a study summary keeps of it
    optional: ClassVar[tuple[str, ...]] = ()  # fields left out of the record when None

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"event": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in self.optional:
                continue
            record[f.name.rstrip("_")] = value  # from_ -> "from"
        return record

    def stamped(self, unit: int, rollouts: int, wall_s: float) -> dict[str, Any]:
        """With the process's time per part so far (whale.core.timing), so the wall time splits."""
        return {
            **self.to_json(), "unit": unit, "rollouts": rollouts, "wall_s": round(wall_s, 2),
            "parts_s": snapshot(),
        }  # fmt: skip


def point_stamp(rollouts: int, spent: int, wall_s: float) -> dict[str, Any]:
    """What an evaluation point carries beside its scores: the budget it stands for, what had been
    spent, and the wall time, whole and per part."""
    return {"rollouts": rollouts, "spent": spent, "wall_s": round(wall_s, 2), "parts_s": snapshot()}


@dataclass
class Start(Event):
    kind: ClassVar[str] = "start"
    config: dict[str, Any]  # as run: engine kind, "auto" dtypes and lockstep as decided (a resume keeps them)
    compute: dict[str, str]  # the engine's and the trainer's dtype, and why


@dataclass
class Resume(Event):
    kind: ClassVar[str] = "resume"
    unit: int


@dataclass
class SandboxWarning(Event):
    kind: ClassVar[str] = "sandbox_warning"
    problems: list[str]


@dataclass
class WeightStep(Event):
    kind: ClassVar[str] = "weight_step"
    summary_fields: ClassVar[tuple[str, ...]] = (
        "step", "algorithm", "train_reward", "kept", "total", "examples", "dropped_tasks", "loss", "kl",
        "margin", "mean_abs_advantage", "harnesses", "rescue",
    )  # fmt: skip
    optional: ClassVar[tuple[str, ...]] = ("rescue",)
    step: int
    phase: int
    algorithm: str
    harnesses: dict[str, int]  # harness id -> tasks it ran
    train_reward: float
    kept: int
    total: int
    kept_fraction: float
    examples: int
    examples_by_harness: dict[str, int]
    dropped_tasks: int
    loss: float
    kl: float | None
    margin: float | None
    mean_abs_advantage: float | None
    optimizer_steps: int
    weights: str  # the weights version served after the step
    rescue: dict[str, Any] | None = None  # weights.rescue: what it tried, rescued and trained (RescueReport)


def weight_step_event(
    result: WeightStepResult, step: int, phase: int, algorithm: str, weights: str
) -> WeightStep:
    total = len(result.rollouts)
    return WeightStep(
        step, phase, algorithm, result.harnesses, result.train_reward, result.kept, total,
        result.kept / max(total, 1), result.examples, result.by_harness, result.dropped_tasks, result.loss,
        result.kl, result.margin, result.mean_abs_advantage, result.optimizer_steps, weights,
        asdict(result.rescue) if result.rescue else None,
    )  # fmt: skip


HYPOTHESIS_CHARS = 160  # of each challenger's hypothesis kept in events and summaries


@dataclass
class SearchIteration(Event):
    kind: ClassVar[str] = "search_iteration"
    summary_fields: ClassVar[tuple[str, ...]] = (
        "iteration", "incumbent", "incumbent_score", "accepted", "candidates", "spent", "reason",
        "hypotheses",
    )  # fmt: skip
    optional: ClassVar[tuple[str, ...]] = ("reason", "population", "decision_rollouts")
    iteration: int
    incumbent: str
    incumbent_score: float
    accepted: bool
    reason: str | None  # the acceptance rule's verdict
    population: dict[str, float] | None  # fast-slow: member -> search score
    candidates: dict[str, float]  # challengers evaluated -> search score
    failed: dict[str, str]  # challengers that never got a score -> why
    spent: int
    proposal: str
    proposer_cost: dict[str, Any]
    decision_rollouts: int | None = None  # the challenger rollouts the acceptance decision cost
    # challenger -> what its proposer says it changed (the program proposer's starts with the mechanism), so
    # a study summary can tell which mechanisms were accepted, and when, without the run's archive
    hypotheses: dict[str, str] = field(default_factory=dict)


def search_event(
    result: Any, iteration: int, incumbent: str, score: float, accepted: bool, population: Any = None
) -> SearchIteration:
    """The record of one search iteration, from a search IterationResult or PopulationResult."""
    return SearchIteration(
        iteration, incumbent, score, accepted, result.reason, population,
        {e.candidate_id: e.mean for e in result.evaluated}, result.failed, len(result.rollouts),
        result.proposal.note, result.proposal.cost, result.decision_rollouts,
        {c.id: c.hypothesis[:HYPOTHESIS_CHARS] for c in result.proposal.candidates},
    )  # fmt: skip


@dataclass
class Reeval(Event):
    kind: ClassVar[str] = "reeval"
    summary_fields: ClassVar[tuple[str, ...]] = ("harness", "score", "spent")
    harness: str
    score: float
    spent: int


@dataclass
class PhaseSwitch(Event):
    kind: ClassVar[str] = "phase_switch"
    summary_fields: ClassVar[tuple[str, ...]] = ("from", "to", "phase", "length", "reason")
    from_: str
    to: str
    phase: int
    length: int
    reason: str
    signals: dict[str, Any]


@dataclass
class End(Event):
    kind: ClassVar[str] = "end"
    reason: str


UNIT_EVENTS = (WeightStep, SearchIteration, Reeval, PhaseSwitch)
SUMMARY_FIELDS = {cls.kind: cls.summary_fields for cls in UNIT_EVENTS}
