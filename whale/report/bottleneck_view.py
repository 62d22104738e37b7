"""The report's bottleneck section: each side's effect measured on val by the 2x2 cross-evaluation, then
the test change apportioned between the sides (whale/studies/bottleneck.py has the arithmetic)."""

from __future__ import annotations

from whale.report.html import esc, none_html, section_html, table_html
from whale.report.plots import img_html, plot_bottleneck, plot_measured
from whale.report.run_files import RunFiles
from whale.run.schedule import HARNESS, WEIGHTS
from whale.studies.bottleneck import (
    Estimate,
    Interval,
    attribute_gains,
    bottleneck_verdict,
    gain_per_1000,
    measured_intervals,
    measured_totals,
    measured_verdict,
)


def section_bottleneck(run: RunFiles) -> str:
    title = "Bottleneck: which side moved accuracy, weights or harness"
    intervals = attribute_gains(run.points, run.events)
    if not intervals:
        return section_html("bottleneck", title, none_html("none: fewer than two evaluation points"))
    k = int(run.config.get("eval", {}).get("k", 1))
    body = measured_html(run, intervals, k) + "\n" + apportioned_html(intervals)
    return section_html("bottleneck", title, body)


def estimate_text(e: Estimate | None) -> str:
    return "-" if e is None else f"{e.mean:+.3f} [{e.ci_low:+.3f}, {e.ci_high:+.3f}]"


def measured_html(run: RunFiles, intervals: list[Interval], k: int) -> str:
    """Per interval and in total: each side's val effect with its task-resampled 95% CI."""
    measured = measured_intervals(run.points)
    totals = measured_totals(run.points)
    rows = []
    for spent, m in zip(intervals, measured, strict=True):
        points = f"{spent.start_point} \u2192 {spent.end_point}"
        if m is None:
            rows.append([points, "not measured: both sides changed, eval.cross off", "-", "-", "-"])
            continue
        cells = [estimate_text(m.weights), estimate_text(m.harness), estimate_text(m.interaction)]
        rows.append([points, m.basis, *cells])
    explain = (
        '<p class="note">Each evaluation point records each side\'s effect on val mean@k since the point '
        "before. When only one side changed, the change is that side's effect. When both did, the two mixed "
        "agents are scored on val too (new weights with the old harness, old weights with the new harness: "
        "<code>eval.cross</code>, on by default when they cost at most one evaluation), each side's effect "
        "is the mean of its two one-side changes, so the two add up to the change, and the interaction "
        "(what the pair gained beyond the two alone) is shared equally between them. The same tasks and "
        "sample seeds run in every corner, so the effects are paired; intervals resample val tasks.</p>"
    )
    head = ["points", "basis", "weights effect", "harness effect", "interaction"]
    verdict = esc(measured_verdict(totals, k))
    out = f"<h3>Measured, on val</h3>\n<p><strong>{verdict}</strong></p>\n{explain}\n"
    if totals is not None:
        out += img_html(plot_measured(measured, totals), "measured val effect by side") + "\n"
        total_rows = [
            ["weights", estimate_text(totals.weights)],
            ["harness", estimate_text(totals.harness)],
            ["interaction", estimate_text(totals.interaction)],
            ["weights minus harness", estimate_text(totals.difference)],
        ]
        summed = f"summed over {totals.measured} measured intervals"
        out += table_html([summed, "val effect"], total_rows, {1})
    return out + "\n" + table_html(head, rows, {2, 3, 4})


def apportioned_html(intervals: list[Interval]) -> str:
    """The test change between points, credited to the side that changed (split when both did)."""
    rows = [
        [
            f"{i.start_point} \u2192 {i.end_point}",
            f"{i.start_rollouts}\u2013{i.end_rollouts}",
            f"{i.change:+.4f}",
            str(i.weight_rollouts),
            str(i.harness_rollouts),
            f"{i.gain(WEIGHTS):+.4f}",
            f"{i.gain(HARNESS):+.4f}",
            f"{1000 * i.change / i.spent:+.4f}" if i.spent else "-",
            "yes" if i.within_ci else "no",
            i.basis,
        ]
        for i in intervals
    ]
    head = [
        "points",
        "rollouts",
        "test change",
        "weight rollouts",
        "harness rollouts",
        "weights gain",
        "harness gain",
        "change per 1,000",
        "within CI (noise)",
        "credited",
    ]
    rates = gain_per_1000(intervals)
    totals = table_html(
        ["phase kind", "rollouts", "attributed test change", "per 1,000 rollouts"],
        [
            [
                k,
                str(sum(i.weight_rollouts if k == WEIGHTS else i.harness_rollouts for i in intervals)),
                f"{sum(i.gain(k) for i in intervals):+.4f}",
                "-" if rates[k] is None else f"{rates[k]:+.4f}",
            ]
            for k in (WEIGHTS, HARNESS)
        ],
        {1, 2, 3},
    )
    explain = (
        '<p class="note">The test mean@k change between two consecutive evaluation points goes to the side '
        "whose part of the agent changed (the weights version or the harness id): all of it when only one "
        "changed, none to a side that did not. Only when both changed is it split in proportion to the "
        "budget rollouts each spent in between (RFT steps vs search iterations and re-evaluations); the "
        "column 'credited' says which.</p>"
    )
    return (
        f"<h3>Apportioned, on test</h3>\n<p><strong>{esc(bottleneck_verdict(intervals))}</strong></p>\n"
        + f"{explain}\n"
        + img_html(plot_bottleneck(intervals), "attributed test change by phase kind")
        + "\n"
        + totals
        + "\n"
        + table_html(head, rows, set(range(1, 8)))
    )
