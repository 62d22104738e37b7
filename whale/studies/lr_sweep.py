"""How the learning-rate sweep (the rate pilots: weight-only on math at each rate) picks a rate: on
validation, test only reports what the pick scores."""

from __future__ import annotations

import statistics

from whale.run.summary import best_val_point
from whale.studies.compare import RunData


def selected_val(runs: list[RunData]) -> float:
    """The pick's criterion: validation mean@k at each run's validation-selected point, over seeds."""
    return statistics.fmean(best_val_point(r.points)["val"]["mean"] for r in runs)


def collapse(run: RunData) -> float:
    """How far the test score fell from its peak by the run's last point."""
    tests = [p["test"]["mean"] for p in run.points]
    return max(tests) - tests[-1]


def pick_rate(swept: dict[str, list[RunData]]) -> str:
    """The rate with the best `selected_val`; on a tie, the smaller rate (the gentler update)."""
    return max(swept, key=lambda lr: (round(selected_val(swept[lr]), 9), -float(lr)))
