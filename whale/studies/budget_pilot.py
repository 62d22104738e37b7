"""The budget pilot: weight-only run past the results presets' budget, to find where its curve flattens,
so that the edition's budget is one at which weight-only has had its chance (issue 33)."""

from __future__ import annotations

from whale.studies.compare import md_table, mean_curve
from whale.studies.plan import StudySummary

FLAT = 0.02  # flattened: no later point's seed-mean validation score is higher by more than this


def flattened_at(curve: list[tuple[float, float]]) -> float:
    """The first budget after which the curve never rises by more than FLAT (validation, not test)."""
    for i, (rollouts, value) in enumerate(curve):
        if all(later <= value + FLAT for _, later in curve[i + 1 :]):
            return rollouts
    return curve[-1][0]


def section_pilot(s: StudySummary) -> list[str]:
    curve = mean_curve(s.runs["weight-only"], "val")
    at = flattened_at(curve)
    rows = [
        [f"{rollouts:.0f}", f"{value:.3f}", "flat from here" if rollouts == at else ""]
        for rollouts, value in curve
    ]
    return [
        f"Budget pilot ({s.study.name}): weight-only's seed-mean validation mean@{s.k}. It has flattened "
        f"at the first point after which it never rises by more than {FLAT:.2f}: **{at:.0f} budget "
        "rollouts**, the smallest budget the edition's studies of this domain may use.",
        "",
        md_table(["budget rollouts", f"val mean@{s.k}", ""], rows),
        "",
    ]
