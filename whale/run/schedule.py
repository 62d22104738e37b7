"""Which phase runs next, for every method the paper compares.

A schedule sees one `UnitReport` after each finished unit (a weight step or a search iteration) and
answers with the next state and, when it switches phase, the reason and the signal values behind it.
State is plain JSON so a resumed run continues the same phase with the same patience counters.

    whale                    E weight steps, then I search iterations, repeated
    whale-adaptive           each phase ends when its signal stops improving by more than its noise
    weight-only              weight steps only (the harness stays the seed)
    harness-only             search iterations only (the weights stay the base model)
    stagewise                all weight steps, then all search: the budget split at `stage_split`
    stagewise-harness-first  the reverse
    fast-slow                a population of harnesses evolved by prompt text (fast), weights sampled
                             under it (slow), alternating with fixed lengths as in `whale`
    whale-gain               phases end as in whale-adaptive; the next goes to the side whose recent
                             gain per rollout is larger, by Thompson sampling (after one probe of each)
    harness-random           harness-only with the program proposer's mechanisms in random order
    harness-resample         harness-only whose proposer returns the incumbent unchanged, with its own
                             random numbers: every acceptance is a false one
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from whale.core.config import METHODS

WEIGHTS, HARNESS = "weights", "harness"


def other(kind: str) -> str:
    return HARNESS if kind == WEIGHTS else WEIGHTS


@dataclass
class ScheduleState:
    kind: str  # the phase now running: "weights" or "harness"
    phase: int = 0  # index of that phase
    done_in_phase: int = 0  # units finished in it
    values: list[float] = field(default_factory=list)  # this phase's signal, one value per unit
    best: float | None = None  # best smoothed signal so far in this phase
    stale: int = 0  # units since the signal last improved by more than its noise
    # whale-gain only: where this phase started, its signal before its first unit, each side's phase gains
    # per budget rollout (oldest first) and the kinds of the phases run so far
    start_rollouts: int = 0
    baseline: float | None = None
    gains: dict[str, list[float]] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class UnitReport:
    """What one finished unit tells the schedule."""

    kind: str
    value: float  # weights: mean train reward of the step; harness: incumbent (best) search-set score
    improved: bool = False  # harness: a challenger beat the incumbent by the acceptance rule
    rollouts: int = 0  # budget spent so far, all phases
    limit: int = 0  # the budget
    samples: int = 0  # weights: the rollouts behind `value` (its binomial noise); 0 when not known
    before: float | None = None  # harness: the incumbent's search score before the unit
    measured: dict[str, Any] | None = None  # each side's measured val gains per rollout (measured_gains)


@dataclass(frozen=True)
class Decision:
    state: ScheduleState
    switched: bool
    reason: str = ""
    signals: dict[str, Any] = field(default_factory=dict)


class Schedule(Protocol):
    def initial(self) -> ScheduleState: ...

    def advance(self, state: ScheduleState, report: UnitReport) -> Decision: ...


def _continue(state: ScheduleState, report: UnitReport, **changes: Any) -> ScheduleState:
    fields = {**state.to_json(), "done_in_phase": state.done_in_phase + 1}
    fields["values"] = [*state.values, report.value]
    fields.update(changes)
    return ScheduleState(**fields)


def _switch(state: ScheduleState, reason: str, signals: dict[str, Any]) -> Decision:
    return Decision(ScheduleState(other(state.kind), state.phase + 1), True, reason, signals)


@dataclass(frozen=True)
class FixedAlternation:
    weight_steps: int  # E
    search_iters: int  # I
    start: str = WEIGHTS

    def initial(self) -> ScheduleState:
        return ScheduleState(kind=self.start)

    def length(self, kind: str) -> int:
        return self.weight_steps if kind == WEIGHTS else self.search_iters

    def advance(self, state: ScheduleState, report: UnitReport) -> Decision:
        nxt = _continue(state, report)
        if nxt.done_in_phase < self.length(state.kind):
            return Decision(nxt, False)
        return _switch(state, "fixed length", {"done_in_phase": nxt.done_in_phase})


@dataclass(frozen=True)
class SinglePhase:
    """weight-only or harness-only: one phase for the whole budget."""

    kind: str

    def initial(self) -> ScheduleState:
        return ScheduleState(kind=self.kind)

    def advance(self, state: ScheduleState, report: UnitReport) -> Decision:
        return Decision(_continue(state, report), False)


@dataclass(frozen=True)
class Stagewise:
    """One phase until `split` of the budget is spent, then the other for the rest."""

    first: str
    split: float

    def initial(self) -> ScheduleState:
        return ScheduleState(kind=self.first)

    def advance(self, state: ScheduleState, report: UnitReport) -> Decision:
        share = report.rollouts / max(report.limit, 1)
        if state.kind == self.first and share >= self.split:
            signals = {"rollouts": report.rollouts, "share": round(share, 4)}
            return _switch(state, "stage budget spent", signals)
        return Decision(_continue(state, report), False)


@dataclass(frozen=True)
class Patience:
    """End a phase after `patience` units without a significant improvement, within [min_len, max_len]."""

    patience: int
    min_len: int
    max_len: int


def window_stats(values: list[float], window: int, samples: int = 0) -> tuple[float, float]:
    """The mean of the last `window` values and its standard error: binomial when each value is the mean
    reward of `samples` rollouts (an upper bound for rewards in [0, 1]), else from the values' spread."""
    tail = values[-window:]
    mean = sum(tail) / len(tail)
    if samples > 0:
        p = min(1.0, max(0.0, mean))
        return mean, math.sqrt(p * (1 - p) / (samples * len(tail)))
    if len(tail) < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in tail) / (len(tail) - 1)
    return mean, math.sqrt(var / len(tail))


@dataclass(frozen=True)
class AdaptiveAlternation:
    """whale-adaptive: switch when the running phase's signal has stopped improving.

    Weights: the windowed mean train reward must beat the best so far by more than its standard error;
    the phase's first step is the baseline (neither an improvement nor stale).
    Harness: an iteration improves only when the search accepted a challenger by the acceptance rule;
    the incumbent the phase starts with is the baseline, so an iteration that accepts nothing is stale,
    the first one included.
    """

    weights: Patience
    harness: Patience
    window: int = 3
    start: str = WEIGHTS

    def initial(self) -> ScheduleState:
        return ScheduleState(kind=self.start)

    def advance(self, state: ScheduleState, report: UnitReport) -> Decision:
        rule = self.weights if state.kind == WEIGHTS else self.harness
        values = [*state.values, report.value]
        baseline = False
        if state.kind == WEIGHTS:
            level, noise = window_stats(values, self.window, report.samples)
            baseline = state.best is None
            improved = not baseline and level > state.best + noise
            signals = {"windowed_reward": round(level, 4), "stderr": round(noise, 4), "best": state.best}
        else:
            level, improved = report.value, report.improved
            signals = {"search_score": round(level, 4), "accepted": report.improved, "best": state.best}
        best = level if improved or state.best is None else state.best
        stale = 0 if improved or baseline else state.stale + 1
        nxt = _continue(state, report, best=best, stale=stale)
        signals.update(stale=stale, patience=rule.patience, done_in_phase=nxt.done_in_phase)
        if nxt.done_in_phase >= rule.max_len:
            return _switch(state, "max phase length", signals)
        if nxt.done_in_phase >= rule.min_len and stale >= rule.patience:
            return _switch(state, "patience ran out", signals)
        return Decision(nxt, False, "", signals)


def measured_gains(
    known: dict[str, Any] | None, effects: dict[str, Any] | None, train: int, search: int
) -> dict[str, Any]:
    """After an evaluation point: each side's val effect since the last point (the 2x2 cross-evaluation,
    whale/run/cross_eval.py) per budget rollout that side spent in between (weights: training rollouts,
    harness: search rollouts), appended to its list. A side that spent nothing measured nothing; an
    interval whose change could only be apportioned (both sides changed, no corners) adds nothing."""
    known = known or {}
    at = known.get("at", {})
    spent = {WEIGHTS: train - at.get(WEIGHTS, 0), HARNESS: search - at.get(HARNESS, 0)}
    out = {side: list(known.get(side, [])) for side in (WEIGHTS, HARNESS)}
    for side in (WEIGHTS, HARNESS):
        if effects is not None and spent[side] > 0:
            values = effects[side]
            out[side].append(sum(values) / len(values) / spent[side])
    return {**out, "at": {WEIGHTS: train, HARNESS: search}}


def phase_gain(state: ScheduleState, report: UnitReport) -> float:
    """The ending phase's gain per budget rollout. Weights: the train reward of its last step over its
    first's; a step's reward is drawn before its update, so n steps show n - 1 updates and are charged
    for those. Harness: the incumbent's search score at its end over the score it started from (the sum
    of its accepted gains)."""
    values, spent = [*state.values, report.value], max(1, report.rollouts - state.start_rollouts)
    if state.kind == WEIGHTS:
        shown = len(values) - 1
        return (values[-1] - values[0]) / (spent * shown / len(values)) if shown else 0.0
    start = state.baseline if state.baseline is not None else values[0]
    return (values[-1] - start) / spent


@dataclass(frozen=True)
class GainDriven:
    """whale-gain: a phase ends as in whale-adaptive (patience, within min and max units). The first two
    phases probe each side (weights, then harness); after them each phase goes to the side whose gain
    per budget rollout, drawn from a normal around the mean of its last `window` gains (Thompson
    sampling), is larger. The gains are measured on val at evaluation points (measured_gains) once both
    sides have such a measurement, and are the phases' own signals until then (phase_gain). A side left
    out for `explore_every` phases runs next whatever its draw."""

    phases: AdaptiveAlternation
    window: int = 3
    explore_every: int = 4
    seed: int = 0

    def initial(self) -> ScheduleState:
        return ScheduleState(kind=WEIGHTS)

    def advance(self, state: ScheduleState, report: UnitReport) -> Decision:
        if state.done_in_phase == 0 and state.baseline is None:
            state = replace(state, baseline=report.before)
        inner = self.phases.advance(state, report)
        if not inner.switched:
            return inner
        gains = {k: list(v) for k, v in state.gains.items()}
        gains.setdefault(state.kind, []).append(phase_gain(state, report))
        ran = [*state.ran, state.kind]
        measured = {k: v for k, v in (report.measured or {}).items() if k in (WEIGHTS, HARNESS)}
        kind, signals = self.choose(gains, ran, state.phase, measured)
        signals.update(ended=inner.reason, **inner.signals)
        nxt = ScheduleState(kind, state.phase + 1, start_rollouts=report.rollouts, gains=gains, ran=ran)
        return Decision(nxt, True, signals["why"], signals)

    def choose(
        self, gains: dict[str, list[float]], ran: list[str], phase: int, measured: dict[str, list[float]]
    ) -> tuple[str, dict[str, Any]]:
        """The next phase's side and the numbers behind the choice."""
        untried = [k for k in (WEIGHTS, HARNESS) if not gains.get(k)]
        if untried:
            return untried[0], {"why": f"probe: {untried[0]} not measured yet", "gains": gains}
        for k in (WEIGHTS, HARNESS):
            if k not in ran[-self.explore_every :]:
                return k, {"why": f"explore: {k} not run in {self.explore_every} phases", "gains": gains}
        on_val = all(measured.get(k) for k in (WEIGHTS, HARNESS))
        source = measured if on_val else gains
        recent = {k: source[k][-self.window :] for k in (WEIGHTS, HARNESS)}
        spread = [abs(g) for v in recent.values() for g in v] or [0.0]
        fallback = max(max(spread), 1e-6)  # the scale of a side measured once: the run's gains so far
        rng = random.Random(self.seed * 1_000_003 + phase)
        draws, means = {}, {}
        for k, values in recent.items():
            means[k] = sum(values) / len(values)
            sd = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else fallback
            draws[k] = rng.gauss(means[k], max(sd, 1e-9))
        kind = max(draws, key=lambda k: (draws[k], k == WEIGHTS))
        basis = "measured on val" if on_val else "phase signals"
        against = f"{draws[other(kind)]:+.2e}"
        why = f"gain ({basis}): {kind} drew {draws[kind]:+.2e} per rollout against {against}"
        signals = {"why": why, "gains": gains, "means": means, "draws": draws, "basis": basis}
        return kind, signals | ({"measured": measured} if on_val else {})


@dataclass(frozen=True)
class MethodRules:
    """What a method changes beyond its phase rule; the experiment asks these instead of method names."""

    trains: bool = True  # False: harness-only never takes a weight step (a server without ids may serve)
    population: bool = False  # fast-slow: the harness phase evolves a population, the best one evaluated
    prompts_only: bool = False  # fast-slow: proposals may change prompt text only
    ends_with_proposer: bool = False  # harness-only: once the proposer's budget is spent, the run ends
    random_mechanisms: bool = False  # harness-random: the program proposer ignores the failure diagnosis
    resample: bool = False  # harness-resample: the proposer returns copies of the incumbent


HARNESS_ONLY = ("harness-only", "harness-random", "harness-resample")  # the last two: controls (issue 32)


def method_rules(method: str) -> MethodRules:
    if method in HARNESS_ONLY:
        shuffled, resample = method == "harness-random", method == "harness-resample"
        return MethodRules(False, ends_with_proposer=True, random_mechanisms=shuffled, resample=resample)
    if method == "fast-slow":
        return MethodRules(population=True, prompts_only=True)
    return MethodRules()


def weight_phase_steps(cfg: Any, train_tasks: int, tasks_per_step: int) -> int:
    """E in weight steps: `cfg.weight_epochs` passes over the train split when set (the paper's E = 0.6
    epoch: each step draws `tasks_per_step` tasks, rounded up), else `cfg.weight_steps`."""
    if cfg.weight_epochs is None:
        return cfg.weight_steps
    return max(1, math.ceil(cfg.weight_epochs * train_tasks / tasks_per_step - 1e-9))


def adaptive_phases(a: Any, start: str) -> AdaptiveAlternation:
    """whale-adaptive's phase rule from `schedule.adaptive` (whale-gain ends its phases by it too)."""
    return AdaptiveAlternation(
        Patience(a.patience, a.min_weight_steps, a.max_weight_steps),
        Patience(a.patience, a.min_search_iters, a.max_search_iters),
        a.window,
        start,
    )


def build_schedule(cfg: Any, train_tasks: int = 0, tasks_per_step: int = 1, seed: int = 0) -> Schedule:
    """The schedule named by `cfg.method` (a ScheduleConfig); the train split's size and the tasks per
    RFT step turn `weight_epochs` into steps; `seed` (the run's) seeds whale-gain's draws."""
    method = cfg.method
    if method in ("whale", "fast-slow"):
        steps = weight_phase_steps(cfg, train_tasks, tasks_per_step)
        return FixedAlternation(steps, cfg.search_iters, cfg.start)
    if method == "whale-adaptive":
        return adaptive_phases(cfg.adaptive, cfg.start)
    if method == "whale-gain":
        a = cfg.adaptive
        return GainDriven(adaptive_phases(a, WEIGHTS), a.gain_window, a.explore_every, seed)
    if method == "weight-only":
        return SinglePhase(WEIGHTS)
    if method in HARNESS_ONLY:
        return SinglePhase(HARNESS)
    if method == "stagewise":
        return Stagewise(WEIGHTS, cfg.stage_split)
    if method == "stagewise-harness-first":
        return Stagewise(HARNESS, cfg.stage_split)
    raise ValueError(f"unknown schedule method {method!r} (known: {', '.join(METHODS)})")
