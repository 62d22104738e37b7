"""The pilots: weight-only run past the results presets' budget, to find where its curve flattens, so that
the edition's rate and budget are ones at which weight-only has had its chance (issue 33).

The rate and budgets are derived when a study runs, from the pilots' committed summaries, instead of being
written into the presets: writing them would make a new commit, and the edition runs at one commit, pilots
included.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import replace
from pathlib import Path

from whale.core.config import Config, ConfigError, load_config
from whale.run.summary import best_val_point
from whale.studies.claims import pts
from whale.studies.compare import RunData, md_table, mean_curve, paired_seeds, plot_curves
from whale.studies.lr_sweep import collapse, pick_rate, selected_val
from whale.studies.plan import (
    EDITION,
    LR_SWEEP,
    PILOTS,
    RATE_PILOTS,
    Study,
    StudySummary,
    load_summary,
    summary_path,
)

FLAT = 0.02  # flattened: no later point's seed-mean validation score is higher by more than this
POINTS = 4  # evaluation intervals per run at the derived budget (five points, as the presets have)


def flattened_at(curve: list[tuple[float, float]]) -> float:
    """The first budget after which the curve never rises by more than FLAT (validation, not test)."""
    for i, (rollouts, value) in enumerate(curve):
        if all(later <= value + FLAT for _, later in curve[i + 1 :]):
            return rollouts
    return curve[-1][0]


def still_rising(curve: list[tuple[float, float]]) -> bool:
    """Flat only from its last point on, which says nothing: the curve may still be rising."""
    return len(curve) > 1 and flattened_at(curve) == curve[-1][0]


def finished(docs: Path, study: Study) -> StudySummary | None:
    """This edition's complete summary of the study, if there is one (read again only when its file
    changes: a plan asks for the pilots' summaries once per pair of studies)."""
    path = summary_path(docs, study)
    if not path.is_file():
        return None
    stat = path.stat()
    return finished_as_of(docs, study, (stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=64)
def finished_as_of(docs: Path, study: Study, stamp: tuple[int, int]) -> StudySummary | None:
    summary = load_summary(docs, study)
    return summary if summary is not None and summary.meta.get("edition") == EDITION else None


def pilot_budget(pilot: StudySummary) -> int:
    """Where the pilot's weight-only flattened, never below its preset's own budget."""
    floor = load_config(pilot.study.preset, None, []).schedule.budget_rollouts
    return max(floor, int(flattened_at(mean_curve(pilot.runs["weight-only"], "val"))))


def up_to(run: RunData, budget: int) -> RunData:
    return replace(run, points=[p for p in run.points if p["rollouts"] <= budget])


def rate_readings(docs: Path) -> dict[str, tuple[int, list[RunData]]] | None:
    """rate -> the budget where its pilot flattened, and its runs read up to that budget; None until every
    rate pilot is complete."""
    readings = {}
    for lr, pilot in zip(LR_SWEEP, RATE_PILOTS, strict=True):
        summary = finished(docs, pilot)
        if summary is None:
            return None
        budget = pilot_budget(summary)
        readings[lr] = budget, [up_to(r, budget) for r in summary.runs["weight-only"]]
    return readings


def picked_rate(docs: Path) -> tuple[str, int] | None:
    """The rate picked on validation, each rate's runs read up to its own flattening budget, and the math
    budget (the pick's)."""
    readings = rate_readings(docs)
    if readings is None:
        return None
    lr = pick_rate({lr: runs for lr, (_, runs) in readings.items()})
    return lr, readings[lr][0]


def pilot_of(study: Study, docs: Path) -> Study | None:
    """The pilot that sets a study's budget: its domain's (on math, the picked rate's); none for a pilot
    or for gym."""
    if study in PILOTS:
        return None
    if study.preset == "results-math":
        picked = picked_rate(docs)
        return (
            None if picked is None else next(p for p in RATE_PILOTS if p.name == f"math-budget-{picked[0]}")
        )
    return next((p for p in PILOTS if p.preset == study.preset), None)


def takes_picked_rate(study: Study) -> bool:
    """Every study of the results presets but the rate pilots (a study on another preset is a test's)."""
    return study.preset.startswith("results-") and study not in RATE_PILOTS


def waiting_for(study: Study, docs: Path) -> list[str]:
    """The pilots this edition has not completed and the study's rate or budget waits for."""
    if not takes_picked_rate(study):
        return []
    waiting = [p.name for p in RATE_PILOTS if finished(docs, p) is None]
    if waiting:
        return waiting
    pilot = pilot_of(study, docs)
    return [pilot.name] if pilot is not None and finished(docs, pilot) is None else []


def study_overrides(study: Study, docs: Path, pending_ok: bool = False) -> list[str]:
    """The study's overrides behind the rate and budget its pilots give (a study's own overrides win).
    While a pilot is missing, a ConfigError; or, with `pending_ok` (plans), the preset's."""
    waiting = waiting_for(study, docs)
    if waiting and pending_ok:
        return list(study.overrides)
    if waiting:
        raise ConfigError(
            f"study {study.name}: its rate or budget comes from the pilots {', '.join(waiting)}, which this "
            f"edition has not finished; run `whale results --study {waiting[0]}` first"
        )
    if not takes_picked_rate(study):
        return list(study.overrides)
    picked = picked_rate(docs)
    derived = [f"weights.lr={picked[0]}"] if picked is not None else []
    pilot = pilot_of(study, docs)
    summary = finished(docs, pilot) if pilot is not None else None
    if summary is not None:
        budget = pilot_budget(summary)
        derived += [f"schedule.budget_rollouts={budget}", f"eval.every_rollouts={budget // POINTS}"]
    return [*derived, *study.overrides]


def study_config(study: Study, docs: Path, pending_ok: bool = False) -> Config:
    return load_config(study.preset, None, study_overrides(study, docs, pending_ok))


def flattening_line(s: StudySummary) -> list[str]:
    """Whether weight-only had had its chance by the study's end: where its validation curve flattened."""
    if "weight-only" not in s.runs or not s.runs["weight-only"]:
        return []
    curve = mean_curve(s.runs["weight-only"], "val")
    at, end = flattened_at(curve), curve[-1][0]
    if still_rising(curve):
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


def section_rate_pick(docs: Path) -> list[str]:
    """How the rate pilots picked the edition's learning rate and the math budget."""
    readings, picked = rate_readings(docs), picked_rate(docs)
    if readings is None or picked is None:
        return []
    rows = [
        [lr, str(budget), f"{selected_val(runs):.3f}", "the pick" if lr == picked[0] else ""]
        for lr, (budget, runs) in readings.items()
    ]
    return [
        "## The learning rate and the math budget, from the rate pilots",
        "",
        "Each rate's weight-only runs are read up to the budget where its own seed-mean validation curve "
        f"flattened (never below the preset's budget); the pick is the rate with the best validation mean "
        "at each run's validation-selected point within that budget, over seeds (a tie goes to the smaller "
        f"rate). Picked: **{picked[0]}**, so every other study of the edition trains at {picked[0]}, and the "
        f"math studies run at **{picked[1]} budget rollouts**.",
        "",
        md_table(["lr", "flattened at (budget)", "val at val-selected point", ""], rows),
        "",
    ]


def section_lr_sweep(docs: Path) -> list[str]:
    """The rate pilots as the learning-rate sweep: each rate's whole runs, beside the pick."""
    out = ["## Learning-rate sweep (math, weight-only)", ""]
    picked = picked_rate(docs)
    if picked is None:
        return out + ["Not run yet: it is the rate pilots, which `make results` runs first.", ""]
    pilots = {lr: finished(docs, pilot) for lr, pilot in zip(LR_SWEEP, RATE_PILOTS, strict=True)}  # all done
    swept = {lr: s.runs["weight-only"] for lr, s in pilots.items()}
    chosen = picked[0]
    k = pilots[chosen].k
    budgets = [x for x, _ in mean_curve(swept[chosen])]
    rows = []
    for lr, runs in swept.items():
        curve = dict(mean_curve(runs))
        versus = "the pick" if lr == chosen else pts(paired_seeds(runs, swept[chosen], "selected"))
        rows.append(
            [
                lr,
                str(len(runs)),
                *(f"{curve[b]:.3f}" if b in curve else "" for b in budgets),
                f"{selected_val(runs):.3f}",
                f"{statistics.fmean(best_val_point(r.points)['test']['mean'] for r in runs):.3f}",
                versus,
                f"{statistics.fmean(collapse(r) for r in runs):.3f}",
            ]
        )
    head = ["lr", "seeds", *(f"test @{int(b)}" for b in budgets), "val at val-selected point"]
    head += [f"val-selected test mean@{k}", "vs the pick", "peak-to-last test drop"]
    title = "Math, weight-only: test mean@k against rollouts at each learning rate"
    plot = plot_curves(docs / "results" / "math-lr.png", {f"lr {lr}": r for lr, r in swept.items()}, k, title)
    return out + [
        "The rate pilots' runs, whole: LoRA (r 16) weight-only RFT on the math preset at each rate, to "
        f"{int(budgets[-1])} budget rollouts. The pick, **{chosen}**, was made on validation as the section "
        "above says (each rate read up to where its curve flattened); here every point counts, test columns "
        "only report, and differences from the pick are paired by seed and task on the validation-selected "
        "test score.",
        "",
        md_table(head, rows),
        "",
        f"![{title}](results/{plot.name})",
        "",
    ]


def section_pilot(s: StudySummary) -> list[str]:
    runs = sorted(s.runs["weight-only"], key=lambda r: r.seed)
    curve, test = mean_curve(runs, "val"), mean_curve(runs, "test")
    at = flattened_at(curve)
    rising = still_rising(curve)
    rows = [
        [f"{rollouts:.0f}", f"{value:.3f}"]
        + [f"{r.points[i]['val']['mean']:.3f}" for r in runs]
        + [f"{test[i][1]:.3f}", "flat from here" if rollouts == at and not rising else ""]
        for i, (rollouts, value) in enumerate(curve)
    ]
    shape = (
        f"It rose by more than {FLAT:.2f} up to its last point, so it had not flattened within the pilot's "
        f"**{at:.0f} budget rollouts**, the most the edition gives it."
        if rising
        else f"It has flattened at the first point after which it never rises by more than {FLAT:.2f}: "
        f"**{at:.0f} budget rollouts**."
    )
    use = (
        "The rate pick below reads this rate's runs up to "
        f"{pilot_budget(s)} budget rollouts (never below the preset's budget)."
        if s.study in RATE_PILOTS
        else f"The edition's studies on this preset run at {pilot_budget(s)} (never below the preset's "
        "budget), with five evaluation points."
    )
    head = [
        "budget rollouts",
        f"val mean@{s.k}",
        *(f"val, seed {r.seed}" for r in runs),
        "test (seed mean)",
        "",
    ]
    return [
        f"Budget pilot ({s.study.name}): weight-only's seed-mean validation mean@{s.k}. {shape} {use} Each "
        "seed's validation curve and the test curve are beside it, so a collapse shows as one.",
        "",
        md_table(head, rows),
        "",
    ]
