"""The report's matplotlib figures, embedded as base64 PNG data URIs so the page needs nothing else."""

from __future__ import annotations

import base64
import io
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from whale.report.html import esc
from whale.report.run_files import RunFiles, run_end
from whale.run.schedule import HARNESS, WEIGHTS
from whale.studies.bottleneck import (
    Estimate,
    Interval,
    MeasuredInterval,
    MeasuredTotals,
    gain_per_1000,
    phase_intervals,
    start_kind,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


COLORS = {WEIGHTS: "#4c72b0", HARNESS: "#dd8452"}  # phase shading and bars, in every plot


def new_figure(width: float = 8.0, height: float = 4.2, cols: int = 1) -> tuple[Any, Any]:
    """A Figure drawn by the Agg canvas (savefig to PNG), without pyplot's global state."""
    fig = Figure(figsize=(width, height))
    return fig, fig.subplots(1, cols)


def integer_x(ax: Any, xs: list[int]) -> None:
    """Whole-number ticks (steps, iterations), with room on both sides even for a single value."""
    ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def png_uri(fig: Any) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def img_html(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{esc(alt)}">'


def shade_phases(ax: Any, intervals: list[tuple[str, float, float]]) -> None:
    seen = set()
    for kind, a, b in intervals:
        label = None if kind in seen else f"{kind} phase"
        seen.add(kind)
        ax.axvspan(a, b, color=COLORS.get(kind, "#999999"), alpha=0.12, label=label, lw=0)


def plot_curves(run: RunFiles) -> str:
    """Test and validation mean@k with CI bands against budget rollouts, phases shaded."""
    fig, ax = new_figure()
    k = run.points[0]["test"].get("k", "k")
    xs = [p["rollouts"] for p in run.points]
    shade_phases(ax, phase_intervals(start_kind(run.config, run.events), run.events, run_end(run)))
    for split, color, name in (("test", "C3", "test"), ("val", "C2", "validation")):
        ys = [p[split]["mean"] for p in run.points]
        low, high = [p[split]["ci_low"] for p in run.points], [p[split]["ci_high"] for p in run.points]
        ax.fill_between(xs, low, high, color=color, alpha=0.15, lw=0)
        ax.plot(xs, ys, marker="o", color=color, label=f"{name} mean@{k} (95% CI band)")
    ax.set_xlabel("budget rollouts spent (training + search)")
    ax.set_ylabel(f"mean@{k}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return png_uri(fig)


def plot_rft(steps: list[dict[str, Any]]) -> str:
    fig, ax = new_figure(height=3.6)
    xs = [e["step"] for e in steps]
    kept = [e["kept"] / e["total"] if e.get("total") else 0.0 for e in steps]
    ax.plot(xs, kept, marker="s", markersize=9, linestyle="--", alpha=0.6, color="C1",
            label="kept fraction (kept / sampled)")  # fmt: skip
    # Drawn last and thinner: with 0/1 rewards the two lines coincide, and both must stay visible.
    ax.plot(xs, [e["train_reward"] for e in steps], marker="o", markersize=4, color="C0",
            label="train reward (mean over rollouts)")  # fmt: skip
    ax.set_xlabel("weight step")
    integer_x(ax, xs)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return png_uri(fig)


def plot_search(iterations: list[dict[str, Any]]) -> str:
    """Every evaluated candidate's search-set score per iteration; accepted ones starred."""
    fig, ax = new_figure(height=3.6)
    xs, ys, stars = [], [], []
    for e in iterations:
        for cid, mean in (e.get("candidates") or {}).items():
            xs.append(e["iteration"])
            ys.append(mean)
            if e.get("accepted") and cid == e.get("incumbent"):
                stars.append((e["iteration"], mean))
    ax.scatter(xs, ys, color="C0", alpha=0.6, label="candidate")
    if stars:
        ax.scatter(
            *zip(*stars, strict=True),
            marker="*",
            s=220,
            color="C1",
            edgecolor="k",
            zorder=3,
            label="accepted",
        )
    ax.plot(
        [e["iteration"] for e in iterations],
        [e["incumbent_score"] for e in iterations],
        color="k",
        marker="D",
        ms=4,
        drawstyle="steps-post",
        label="incumbent",
    )
    ax.set_xlabel("search iteration")
    integer_x(ax, [e["iteration"] for e in iterations])
    ax.set_ylabel("search-set score")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return png_uri(fig)


def plot_bottleneck(intervals: list[Interval]) -> str:
    """Left: test change per interval, stacked by the phase kind it is attributed to. Right: gain per
    1,000 rollouts by kind over the whole run."""
    fig, (left, right) = new_figure(width=9.0, height=3.6, cols=2)
    labels = [f"{i.start_point}\u2192{i.end_point}" for i in intervals]
    weights = [i.gain(WEIGHTS) for i in intervals]
    harness = [i.gain(HARNESS) for i in intervals]
    left.bar(labels, weights, color=COLORS[WEIGHTS], label="weights")
    # stack on the same sign so that opposite-signed shares do not hide each other
    bottom = [w if (w >= 0) == (h >= 0) else 0.0 for w, h in zip(weights, harness, strict=True)]
    left.bar(labels, harness, bottom=bottom, color=COLORS[HARNESS], label="harness")
    left.axhline(0, color="k", lw=0.8)
    left.set_xlabel("evaluation points")
    if len(labels) > 10:
        left.tick_params(axis="x", labelrotation=90, labelsize="x-small")
    left.set_ylabel("attributed test change")
    left.legend(fontsize="small")
    rates = gain_per_1000(intervals)
    kinds = [k for k in (WEIGHTS, HARNESS) if rates[k] is not None]
    right.bar(kinds, [rates[k] for k in kinds], color=[COLORS[k] for k in kinds])
    right.axhline(0, color="k", lw=0.8)
    right.set_ylabel("test gain per 1,000 rollouts")
    right.set_title("whole run", fontsize="medium")
    return png_uri(fig)


def error_bars(
    ax: Any, xs: list[float], estimates: list[Estimate], color: str, label: str, width: float
) -> None:
    means = [e.mean for e in estimates]
    errors = [[e.mean - e.ci_low for e in estimates], [e.ci_high - e.mean for e in estimates]]
    ax.bar(xs, means, width=width, color=color, label=label, yerr=errors, capsize=3)


def plot_measured(intervals: list[MeasuredInterval | None], totals: MeasuredTotals) -> str:
    """Left: each side's measured val effect per interval, with 95% CIs. Right: the sums over the run."""
    fig, (left, right) = new_figure(width=9.0, height=3.6, cols=2)
    shown = [m for m in intervals if m is not None]
    xs = list(range(len(shown)))
    error_bars(left, [x - 0.2 for x in xs], [m.weights for m in shown], COLORS[WEIGHTS], "weights", 0.4)
    error_bars(left, [x + 0.2 for x in xs], [m.harness for m in shown], COLORS[HARNESS], "harness", 0.4)
    left.set_xticks(xs, [f"{m.start_point}\u2192{m.end_point}" for m in shown])
    if len(xs) > 10:
        left.tick_params(axis="x", labelrotation=90, labelsize="x-small")
    left.axhline(0, color="k", lw=0.8)
    left.set_xlabel("evaluation points")
    left.set_ylabel("measured val effect")
    left.legend(fontsize="small")
    error_bars(right, [0], [totals.weights], COLORS[WEIGHTS], "weights", 0.6)
    error_bars(right, [1], [totals.harness], COLORS[HARNESS], "harness", 0.6)
    right.set_xticks([0, 1], [WEIGHTS, HARNESS])
    right.axhline(0, color="k", lw=0.8)
    right.set_ylabel("summed val effect")
    right.set_title(
        f"whole run ({totals.measured} of {totals.intervals} intervals measured)", fontsize="medium"
    )
    return png_uri(fig)
