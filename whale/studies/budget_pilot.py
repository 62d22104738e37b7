"""The budget pilot: weight-only run past the results presets' budget, to find where its curve flattens,
so that the edition's budget is one at which weight-only has had its chance (issue 33).

The budget is derived when a study runs, from the pilot's committed summary, instead of being written into
the presets: writing it would make a new commit, and the edition runs at one commit, pilots included.
"""

from __future__ import annotations

from pathlib import Path

from whale.core.config import Config, ConfigError, load_config
from whale.studies.compare import md_table, mean_curve
from whale.studies.plan import EDITION, PILOTS, Study, StudySummary, load_summary

FLAT = 0.02  # flattened: no later point's seed-mean validation score is higher by more than this
POINTS = 4  # evaluation intervals per run at the derived budget (five points, as the presets have)


def flattened_at(curve: list[tuple[float, float]]) -> float:
    """The first budget after which the curve never rises by more than FLAT (validation, not test)."""
    for i, (rollouts, value) in enumerate(curve):
        if all(later <= value + FLAT for _, later in curve[i + 1 :]):
            return rollouts
    return curve[-1][0]


def pilot_of(study: Study) -> Study | None:
    """The pilot that sets a study's budget: the one on its preset (none for a pilot, none for gym)."""
    if study in PILOTS:
        return None
    return next((p for p in PILOTS if p.preset == study.preset), None)


def pilot_budget(pilot: StudySummary) -> int:
    """Where the pilot's weight-only flattened, never below its preset's own budget."""
    floor = load_config(pilot.study.preset, None, []).schedule.budget_rollouts
    return max(floor, int(flattened_at(mean_curve(pilot.runs["weight-only"], "val"))))


def finished_pilot(study: Study, docs: Path) -> StudySummary | None:
    """This edition's complete summary of the pilot that sets the study's budget, if there is one."""
    pilot = pilot_of(study)
    summary = load_summary(docs, pilot) if pilot is not None else None
    return summary if summary is not None and summary.meta.get("edition") == EDITION else None


def pilot_pending(study: Study, docs: Path) -> bool:
    """The study's budget waits for a pilot that this edition has not completed."""
    return pilot_of(study) is not None and finished_pilot(study, docs) is None


def study_overrides(study: Study, docs: Path, pending_ok: bool = False) -> list[str]:
    """The study's overrides behind the budget its pilot gives (a study's own overrides win). Until the
    pilot is complete, a ConfigError; or, with `pending_ok` (plans), the preset's budget."""
    pilot, summary = pilot_of(study), finished_pilot(study, docs)
    if pilot is None or (summary is None and pending_ok):
        return list(study.overrides)
    if summary is None:
        raise ConfigError(
            f"study {study.name}: its budget comes from the {pilot.name} pilot, which this edition has not "
            f"finished; run `whale results --study {pilot.name}` first"
        )
    budget = pilot_budget(summary)
    return [f"schedule.budget_rollouts={budget}", f"eval.every_rollouts={budget // POINTS}", *study.overrides]


def study_config(study: Study, docs: Path, pending_ok: bool = False) -> Config:
    return load_config(study.preset, None, study_overrides(study, docs, pending_ok))


def flattening_line(s: StudySummary) -> list[str]:
    """Whether weight-only had had its chance by the study's end: where its validation curve flattened."""
    if "weight-only" not in s.runs or not s.runs["weight-only"]:
        return []
    curve = mean_curve(s.runs["weight-only"], "val")
    at, end = flattened_at(curve), curve[-1][0]
    if at == end and len(curve) > 1:
        return [
            f"Weight-only's seed-mean validation curve rose by more than {FLAT:.2f} up to its last point "
            f"({end:.0f} budget rollouts): it may still be rising.",
            "",
        ]
    return [
        f"Weight-only's seed-mean validation curve was flat from {at:.0f} of the {end:.0f} budget rollouts "
        f"on (no later point higher by more than {FLAT:.2f}).",
        "",
    ]


def section_pilot(s: StudySummary) -> list[str]:
    runs = sorted(s.runs["weight-only"], key=lambda r: r.seed)
    curve, test = mean_curve(runs, "val"), mean_curve(runs, "test")
    at = flattened_at(curve)
    rows = [
        [f"{rollouts:.0f}", f"{value:.3f}"]
        + [f"{r.points[i]['val']['mean']:.3f}" for r in runs]
        + [f"{test[i][1]:.3f}", "flat from here" if rollouts == at else ""]
        for i, (rollouts, value) in enumerate(curve)
    ]
    head = [
        "budget rollouts",
        f"val mean@{s.k}",
        *(f"val, seed {r.seed}" for r in runs),
        "test (seed mean)",
        "",
    ]
    return [
        f"Budget pilot ({s.study.name}): weight-only's seed-mean validation mean@{s.k}. It has flattened "
        f"at the first point after which it never rises by more than {FLAT:.2f}: **{at:.0f} budget "
        f"rollouts**. The edition's studies on this preset run at {pilot_budget(s)} (never below the "
        "preset's own budget), with five evaluation points. Each seed's validation curve and the test curve "
        "are beside it, so a collapse shows as one.",
        "",
        md_table(head, rows),
        "",
    ]
