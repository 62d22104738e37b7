"""Which side carried a run's gains, two ways.

Measured: each evaluation point records each side's val effect since the previous point, from the 2x2
cross-evaluation where both sides changed (whale/run/cross_eval.py); totals are summed per task and
resampled over tasks, and the verdict rests on the paired interval of weights minus harness.
Apportioned: the test gain between points, credited to the side whose part of the agent changed, split
by the budget each spent only when both changed; a side that changed nothing is never credited."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from whale.core.config import ScheduleConfig
from whale.core.stats import bootstrap_ci
from whale.run.schedule import HARNESS, WEIGHTS, build_schedule

SEARCH_EVENTS = ("search_iteration", "reeval")


def unit_kind(event: dict[str, Any]) -> str | None:
    """The phase kind that spent an event's rollouts: weights, harness, or None for other events."""
    if event.get("event") == "weight_step":
        return WEIGHTS
    if event.get("event") in SEARCH_EVENTS:
        return HARNESS
    return None


def unit_rollouts(event: dict[str, Any]) -> int:
    """Budget rollouts spent by one weight step, search iteration or re-evaluation."""
    return int(event.get("total", 0) if event.get("event") == "weight_step" else event.get("spent", 0))


def start_kind(config: dict[str, Any], events: list[dict[str, Any]]) -> str:
    """The first phase: the first switch says where it came from, else the first unit, else the config."""
    for e in events:
        if e.get("event") == "phase_switch":
            return e["from"]
        if unit_kind(e):
            return unit_kind(e)
    try:  # the schedule itself says where it starts; no method is named here
        return build_schedule(ScheduleConfig(**config.get("schedule", {}))).initial().kind
    except (ValueError, TypeError):  # a config from an older whale
        return WEIGHTS


def phase_intervals(kind: str, events: list[dict[str, Any]], end: float) -> list[tuple[str, float, float]]:
    """(kind, first rollout, last rollout) of every phase, from the phase_switch events."""
    out, start = [], 0.0
    for e in events:
        if e.get("event") == "phase_switch":
            out.append((e.get("from", kind), start, float(e["rollouts"])))
            kind, start = e["to"], float(e["rollouts"])
    out.append((kind, start, max(end, start)))
    return [(k, a, b) for k, a, b in out if b > a]


@dataclass
class Interval:
    """The test score change between two consecutive evaluation points and who spent the rollouts."""

    start_point: int
    end_point: int
    start_rollouts: int
    end_rollouts: int
    change: float  # test mean@k at end_point minus at start_point
    weight_rollouts: int
    harness_rollouts: int
    within_ci: bool  # the two points' test CIs overlap: the change is within noise
    weights_changed: bool = True  # the two points' weights versions differ
    harness_changed: bool = True  # the two points' harness ids differ

    @property
    def spent(self) -> int:
        return self.weight_rollouts + self.harness_rollouts

    @property
    def basis(self) -> str:
        """How the change is credited: to the one side that changed, to neither, or split."""
        if self.weights_changed and self.harness_changed:
            return "split by rollout share"
        if self.weights_changed or self.harness_changed:
            return f"{WEIGHTS if self.weights_changed else HARNESS} only changed"
        return "nothing changed"

    def gain(self, kind: str) -> float:
        """The change credited to `kind`: all of it when only `kind` changed, none when `kind` did not
        change, else its share in proportion to the rollouts it spent."""
        mine, other = (
            (self.weights_changed, self.harness_changed)
            if kind == WEIGHTS
            else (self.harness_changed, self.weights_changed)
        )
        if not mine or not self.spent:
            return 0.0
        if not other:
            return self.change
        return self.change * (self.weight_rollouts if kind == WEIGHTS else self.harness_rollouts) / self.spent


def attribute_gains(points: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[Interval]:
    """One Interval per pair of consecutive evaluation points. An event belongs to the interval in which
    its cumulative `rollouts` (recorded after it ran) falls: start < rollouts <= end."""
    out = []
    for a, b in zip(points, points[1:], strict=False):
        spent = {WEIGHTS: 0, HARNESS: 0}
        for e in events:
            kind = unit_kind(e)
            if kind and a["rollouts"] < e.get("rollouts", 0) <= b["rollouts"]:
                spent[kind] += unit_rollouts(e)
        ta, tb = a["test"], b["test"]
        overlap = tb["ci_low"] <= ta["ci_high"] and ta["ci_low"] <= tb["ci_high"]
        out.append(
            Interval(
                a["point"],
                b["point"],
                a["rollouts"],
                b["rollouts"],
                tb["mean"] - ta["mean"],
                spent[WEIGHTS],
                spent[HARNESS],
                overlap,
                a.get("weights") != b.get("weights") or "weights" not in a,
                a.get("harness") != b.get("harness") or "harness" not in a,
            )
        )
    return out


def gain_per_1000(intervals: list[Interval]) -> dict[str, float | None]:
    """Attributed test gain per 1,000 rollouts for each phase kind (None when it spent none)."""
    out: dict[str, float | None] = {}
    for kind in (WEIGHTS, HARNESS):
        spent = sum(i.weight_rollouts if kind == WEIGHTS else i.harness_rollouts for i in intervals)
        out[kind] = 1000 * sum(i.gain(kind) for i in intervals) / spent if spent else None
    return out


def bottleneck_verdict(intervals: list[Interval]) -> str:
    """One plain sentence on which side moved test accuracy more, with the noise caveat."""
    rates = gain_per_1000(intervals)
    w, h = rates[WEIGHTS], rates[HARNESS]
    noisy = sum(i.within_ci for i in intervals)
    caveat = (
        " A side is credited only for intervals in which its part of the agent changed (split by rollout "
        f"share when both did): an attribution, not an ablation; {noisy} of {len(intervals)} "
        "interval(s) changed by less than the 95% CIs, and differences within the CI are noise."
    )
    if w is None and h is None:
        return "No budget rollouts were spent between evaluation points: nothing to attribute."
    if w is None or h is None:
        only = "weight" if h is None else "harness"
        rate = w if h is None else h
        return f"Only {only} phases spent rollouts ({rate:+.4f} test mean per 1,000 rollouts)." + caveat
    if noisy == len(intervals):
        return (
            f"Neither side measurably moved test accuracy: weight phases {w:+.4f} and harness phases "
            f"{h:+.4f} per 1,000 rollouts, but every change is within the 95% CIs, i.e. noise."
        )
    if math.isclose(w, h, rel_tol=1e-9, abs_tol=1e-12):
        return (
            f"Both sides moved test accuracy at the same rate ({w:+.4f} per 1,000 rollouts): every interval "
            "mixed them in the same proportion, so a split by rollout share cannot tell them apart." + caveat
        )
    more, less = ("weight", "harness") if w > h else ("harness", "weight")
    hi, lo = max(w, h), min(w, h)
    verb = "moved test accuracy more" if hi > 0 else "lost less test accuracy (neither side gained)"
    return (
        f"{more.capitalize()} phases {verb}: {hi:+.4f} test mean per 1,000 rollouts, "
        f"against {lo:+.4f} for {less} phases." + caveat
    )


# ---- measured on val: the 2x2 cross-evaluation (whale/run/cross_eval.py) ----------------------------------


@dataclass(frozen=True)
class Estimate:
    """A mean over val tasks with its 95% percentile-bootstrap interval (tasks resampled)."""

    mean: float
    ci_low: float
    ci_high: float

    @property
    def excludes_zero(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0


def estimate(per_task: list[float]) -> Estimate:
    lo, hi = bootstrap_ci(per_task)
    return Estimate(float(sum(per_task) / len(per_task)), lo, hi)


@dataclass(frozen=True)
class MeasuredInterval:
    """Each side's val effect between two consecutive evaluation points, measured (not apportioned)."""

    start_point: int
    end_point: int
    basis: str
    weights: Estimate
    harness: Estimate
    interaction: Estimate | None  # only where the full 2x2 was scored


def interval_effects(points: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """The `effects` record of each pair of consecutive points; None where the change was not measured
    (both sides changed with `eval.cross` off, or a run from before the cross-evaluation)."""
    out = []
    for a, b in zip(points, points[1:], strict=False):
        effects = b.get("effects")
        out.append(effects if effects and effects["from_point"] == a["point"] else None)
    return out


def measured_intervals(points: list[dict[str, Any]]) -> list[MeasuredInterval | None]:
    out: list[MeasuredInterval | None] = []
    for a, effects in zip(points, interval_effects(points), strict=False):
        if effects is None:
            out.append(None)
            continue
        inter = effects.get("interaction")
        out.append(
            MeasuredInterval(
                a["point"],
                a["point"] + 1,
                effects["basis"],
                estimate(effects["weights"]),
                estimate(effects["harness"]),
                estimate(inter) if inter is not None else None,
            )
        )
    return out


@dataclass(frozen=True)
class MeasuredTotals:
    """Each side's summed val effect over the measured intervals, per task, then resampled over tasks."""

    weights: Estimate
    harness: Estimate
    difference: Estimate  # weights minus harness, paired by task
    interaction: Estimate
    measured: int
    intervals: int


def measured_totals(points: list[dict[str, Any]]) -> MeasuredTotals | None:
    """None when no interval was measured."""
    effects = interval_effects(points)
    measured = [e for e in effects if e is not None]
    if not measured:
        return None
    n = len(measured[0]["tasks"])
    weights = [sum(e["weights"][i] for e in measured) for i in range(n)]
    harness = [sum(e["harness"][i] for e in measured) for i in range(n)]
    inter = [sum((e.get("interaction") or [0.0] * n)[i] for e in measured) for i in range(n)]
    difference = [w - h for w, h in zip(weights, harness, strict=True)]
    sides = (estimate(weights), estimate(harness), estimate(difference), estimate(inter))
    return MeasuredTotals(*sides, len(measured), len(effects))


def measured_verdict(totals: MeasuredTotals | None, k: int) -> str:
    """Which side carried the run on val, decided by the paired interval of their difference."""
    if totals is None:
        return "No interval was measured (both sides changed and eval.cross was off): see the split below."
    w, h, d = totals.weights, totals.harness, totals.difference
    numbers = (
        f"weights {w.mean:+.3f} [{w.ci_low:+.3f}, {w.ci_high:+.3f}], harness {h.mean:+.3f} "
        f"[{h.ci_low:+.3f}, {h.ci_high:+.3f}] val mean@{k}; weights minus harness {d.mean:+.3f} "
        f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}]"
    )
    if d.excludes_zero:
        side = "weights" if d.mean > 0 else "harness"
        verdict = f"The {side} carried the run: {numbers}."
    else:
        verdict = f"Inconclusive which side carried the run (the difference's CI covers zero): {numbers}."
    if totals.measured < totals.intervals:
        verdict += (
            f" {totals.intervals - totals.measured} of {totals.intervals} intervals were not measured "
            "(both sides changed with eval.cross off) and are left out."
        )
    return verdict
