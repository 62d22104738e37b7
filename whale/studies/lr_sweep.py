"""The learning-rate sweep behind the presets' `weights.lr`: weight-only on math at each rate, the rate
picked on validation (test only reports what the pick scores)."""

from __future__ import annotations

import statistics
from pathlib import Path

from whale.run.summary import best_val_point
from whale.studies.claims import pts
from whale.studies.compare import RunData, md_table, mean_curve, paired_seeds, plot_curves
from whale.studies.plan import LR_SWEEP, STUDIES, load_summary


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


def section_lr_sweep(docs: Path) -> list[str]:
    studies = {s.name: s for s in STUDIES}
    found = {lr: load_summary(docs, studies[f"math-lr-{lr}"]) for lr in LR_SWEEP}
    out = ["## Learning-rate sweep (math, weight-only)", ""]
    swept = {lr: s.runs["weight-only"] for lr, s in found.items() if s is not None}
    if not swept:
        return out + ["Not run yet (`make results` runs it).", ""]
    k = next(s for s in found.values() if s is not None).k
    chosen = pick_rate(swept)
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
    missing = [lr for lr, s in found.items() if s is None]
    return out + [
        "LoRA (r 16) weight-only RFT on the math study's preset at each rate. The pick is the rate with the "
        "highest validation mean at each run's validation-selected point, averaged over seeds (a tie goes "
        f"to the smaller rate); test columns only report. Picked: **{chosen}**. Differences are paired by "
        "seed and task, on the validation-selected test score.",
        "",
        md_table(head, rows),
        "",
        f"![{title}](results/{plot.name})",
        "",
        *([f"Not run yet: {', '.join(missing)}.", ""] if missing else []),
    ]
