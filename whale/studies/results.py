"""`whale results` (`make results`): the studies behind docs/results.md, run, summarized and rendered.

    <runs>/<folder>/<method>/seed<N>/   ordinary `whale compare` run folders (resumed, reused)
    docs/results/<study>.json           each study's small summary: per-task scores at every evaluation
                                        point, budgets and unit events of every run (no traces)
    docs/results/<study>.png            its test curves
    docs/results.md                     tables, plots, paired tests, bottleneck view and the paper's
                                        claims next to what was measured, rendered from the summaries only

Rendering reads nothing but the summaries, so the document can be regenerated (and checked in CI)
without the run folders. A study whose summary is missing is listed as not run.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from whale.core.files import atomic_write_text
from whale.run.schedule import HARNESS, WEIGHTS
from whale.run.summary import best_val_point
from whale.studies.accepted_mechanisms import section_mechanisms
from whale.studies.beyond import section_beyond
from whale.studies.budget_pilot import flattening_line, section_lr_sweep, section_pilot, section_rate_pick
from whale.studies.claims import (
    attributed_rates,
    claim_a,
    claim_b,
    claim_c,
    claim_d,
    claim_e,
    diff,
    pooled_at,
    pts,
    search_acceptance,
    unchanged_challengers,
)
from whale.studies.compare import (
    build_rows,
    headers,
    md_table,
    paired_seeds,
    per_seed_lines,
    plot_curves,
    table_cells,
)
from whale.studies.compute import section_plan
from whale.studies.plan import (
    ABLATIONS,
    BEYOND,
    GYM,
    PHASE_ABLATION,
    PILOTS,
    STUDIES,
    StudySummary,
    load_summary,
    not_yet,
)
from whale.studies.running import commits_of

# ---- measurements behind the claims ----------------------------------------------------------------------


# ---- rendering -------------------------------------------------------------------------------------------


def duration(seconds: float) -> str:
    h, rest = divmod(int(round(seconds)), 3600)
    return f"{h} h {rest // 60:02d} min" if h else f"{rest // 60} min {rest % 60:02d} s"


def study_wall(s: StudySummary, only: set[str] | None = None) -> float:
    return sum(r.budget["wall_s"] for m, rs in s.runs.items() if only is None or m in only for r in rs)


def with_overrides(overrides: list[str]) -> str:
    return " with " + ", ".join(f"`{o}`" for o in overrides) if overrides else ""


def section_comparison(s: StudySummary, docs: Path) -> list[str]:
    """The method table, the curves, paired tests of whale against every other method."""
    rows = build_rows(s.runs)
    plot = plot_curves(docs / "results" / f"{s.study.name}.png", s.runs, s.k, s.study.title)
    out = [
        f"## {s.study.title}",
        "",
        f"Preset `{s.meta['preset']}`{with_overrides(s.meta['overrides'])}"
        f", domain `{s.meta['domain']}`, {s.meta['budget_rollouts']} budget rollouts per run (training + "
        f"search), seeds per method: {s.meta['seeds']}; the {sum(len(rs) for rs in s.runs.values())} runs "
        f"took {duration(study_wall(s))} of wall time in all. Edition {s.meta.get('edition', 1)}, code: "
        f"{', '.join(commits_of([r for rs in s.runs.values() for r in rs]))}.",
        "",
        md_table(headers(s.k, rows[0].method), [table_cells(r) for r in rows]),
        "",
        f"![{s.study.title}: test mean@{s.k} against rollouts](results/{plot.name})",
        "",
        *flattening_line(s),
    ]
    reference = rows[0].method
    if len(rows) > 1:
        tests = [
            [f"{r.method} - {reference}", pts(r.vs_reference), r.verdict, r.vs_reference.test]
            + [pts(diff(s, r.method, reference, "best"))]
            for r in rows[1:]
        ]
        out += [
            f"Paired differences, each method minus {reference}: paired by seed and task; 95% intervals "
            "resample seeds, then tasks, widened to Student's t over the per-seed means; p-values "
            "Holm-corrected over this table's family. The best-on-test column picks each run's point on "
            "test and is optimistic.",
            "",
            md_table(
                ["pair", f"validation-selected test mean@{s.k}", "verdict", "test", f"best test mean@{s.k}"],
                tests,
            ),
            "",
            f"Per seed, validation-selected test mean@{s.k}, each method minus {reference}:",
            "",
            *per_seed_lines(rows),
            "",
        ]
    return out


def section_bottleneck(s: StudySummary) -> list[str]:
    """Does harness search help before any weight update, and after? Which side moved test accuracy?"""
    rows = []
    for method, runs in s.runs.items():
        before, before_n = search_acceptance(runs, after_weights=False)
        after, after_n = search_acceptance(runs, after_weights=True)
        rates = attributed_rates(runs)
        same, scored = unchanged_challengers(runs)
        rows.append(
            [
                method,
                f"{before}/{before_n}" if before_n else "-",
                f"{after}/{after_n}" if after_n else "-",
                f"{same}/{scored}" if scored else "-",
                "-" if rates[WEIGHTS] is None else f"{rates[WEIGHTS]:+.4f}",
                "-" if rates[HARNESS] is None else f"{rates[HARNESS]:+.4f}",
            ]
        )
    return [
        f"Bottleneck view ({s.study.name}): challengers accepted by the paired test on the search split, "
        "over search iterations run before any weight update and after at least one; challengers whose "
        "search score equals the incumbent's exactly (with common random numbers, almost always an edit "
        "that changed nothing the model saw); and the test mean "
        "change per 1,000 rollouts credited to weight and harness phases (between consecutive evaluation "
        "points, to the side whose weights version or harness changed; split by rollout share only when "
        "both changed; all seeds; an attribution, not an ablation).",
        "",
        md_table(
            [
                "method",
                "accepted before weights",
                "accepted after weights",
                "challengers tied with the incumbent",
                "weights gain / 1k",
                "harness gain / 1k",
            ],
            rows,
        ),
        "",
    ]


def mean_of(steps: list[dict[str, Any]], key: str) -> str:
    """Mean of a step metric where it was logged (a step with no examples logs loss NaN)."""
    values = [float(e[key]) for e in steps if e.get(key) is not None and math.isfinite(e[key])]
    return f"{statistics.fmean(values):+.4f}" if values else "-"


def section_weight_steps(s: StudySummary) -> list[str]:
    """What each weight-phase algorithm did per step: data kept, loss, drift from the phase start."""
    rows = []
    for method, runs in s.runs.items():
        steps = [e for r in runs for e in r.events if e["event"] == "weight_step"]
        if not steps:
            continue
        rows.append(
            [
                method,
                ", ".join(sorted({str(e.get("algorithm", "rft")) for e in steps})),
                str(len(steps)),
                f"{statistics.fmean(e['train_reward'] for e in steps):.3f}",
                f"{statistics.fmean(e['kept'] for e in steps):.1f} / {steps[0]['total']}",
                f"{statistics.fmean(e.get('examples', e['kept']) for e in steps):.1f}",
                str(sum(e.get("dropped_tasks", 0) for e in steps)),
                mean_of(steps, "loss"),
                mean_of(steps, "kl"),
                mean_of(steps, "margin"),
                mean_of(steps, "mean_abs_advantage"),
            ]
        )
    return [
        f"Weight steps ({s.study.name}), all seeds: mean train reward, rollouts trained on per step (RFT: "
        "those that passed; DPO: both sides of each passed-failed pair of a task; GRPO: all of them, "
        "those of a task whose rollouts all passed or all failed with advantage 0 unless "
        "`weights.drop_uniform_groups` drops them), training examples (model calls) per step, and the "
        "means of the step's metrics. Loss, KL to the phase-start weights (logged only where the loss "
        "needs the reference, or with `weights.log_kl`) and the DPO margin are averaged over the step's "
        "minibatches, each measured before its optimizer update, so a phase's first step starts from KL 0"
        " (and DPO loss ln 2 = 0.6931).",
        "",
        md_table(
            [
                "method",
                "algorithm",
                "steps",
                "train reward",
                "rollouts used / step",
                "examples / step",
                "tasks dropped",
                "loss",
                "KL to phase start",
                "DPO margin",
                "GRPO mean abs advantage",
            ],
            rows,
        ),
        "",
    ]


PHASE_HEAD = [
    "label",
    "E",
    "I",
    "best test mean@8",
    "val-selected test mean@8",
    "phase switches",
    "weight steps per run",
    "search iterations that accepted",
    "wall per run",
]


def section_phases(docs: Path) -> list[str]:
    found = [
        (label, e, i, load_summary(docs, study))
        for (label, (e, i)), study in zip(
            PHASE_ABLATION.items(), [s for s in STUDIES if s.name.startswith("math-phases-")], strict=True
        )
    ]
    done = [(label, e, i, s) for label, e, i, s in found if s is not None]
    out = ["## Phase-length ablation (math)", ""]
    if not done:
        return out + ["Not run yet (`make results` runs it).", ""]
    reference = done[0][3]
    rows = []
    for label, e, i, s in done:
        runs = s.runs["whale"]
        d = paired_seeds(runs, reference.runs["whale"], "best")
        best = pooled_at(runs, "best")
        switches = statistics.fmean(sum(e["event"] == "phase_switch" for e in r.events) for r in runs)
        steps = statistics.fmean(sum(e["event"] == "weight_step" for e in r.events) for r in runs)
        accepted = [search_acceptance(runs, after) for after in (False, True)]
        rows.append(
            [
                label,
                str(e),
                str(i),
                f"{statistics.fmean(best.values()):.3f}",
                f"{statistics.fmean(best_val_point(r.points)['test']['mean'] for r in runs):.3f}",
                "reference" if s is reference else pts(d),
                f"{switches:.1f}",
                f"{steps:.1f}",
                f"{sum(a for a, _ in accepted)}/{sum(n for _, n in accepted)}",
                duration(study_wall(s) / len(runs)),
            ]
        )
    missing = [label for label, _, _, s in found if s is None]
    title = "Math: whale with E weight steps and I search iterations per phase"
    plot = plot_curves(
        docs / "results" / "math-phases.png",
        {label: s.runs["whale"] for label, _, _, s in done},
        reference.k,
        title,
    )
    return out + [
        "E = weight steps per weight phase (64 rollouts each), I = search iterations per harness phase.",
        "",
        md_table(PHASE_HEAD[:5] + [f"best vs {done[0][0]}"] + PHASE_HEAD[5:], rows),
        "",
        f"![{title}: test mean@{reference.k} against rollouts](results/{plot.name})",
        "",
        *([f"Not run yet: {', '.join(missing)}.", ""] if missing else []),
    ]


def section_run_time(summaries: list[StudySummary]) -> list[str]:
    """Wall time per study, and what `make results` costs in all: a run that several studies share (same
    folder, method and seed) is run once, and counted in the first study that lists it."""
    seen: set[tuple[str, str, int]] = set()
    rows, total = [], 0.0
    for s in summaries:
        runs = [r for rs in s.runs.values() for r in rs]
        own = [r for r in runs if (s.study.runs_folder, r.method, r.seed) not in seen]
        seen |= {(s.study.runs_folder, r.method, r.seed) for r in own}
        wall = sum(r.budget["wall_s"] for r in own)
        total += wall
        rows.append([s.study.name, str(len(runs)), duration(study_wall(s)), str(len(own)), duration(wall)])
    rows.append(["all (each run once)", "", "", str(len(seen)), duration(total)])
    return [
        "## Run time",
        "",
        "Wall time as each run recorded it, on 2 CPU cores, one run at a time. A run that several studies "
        "share is run once: the last column totals run-hours.",
        "",
        md_table(["study", "runs", "wall", "runs of its own", "their wall"], rows),
        "",
    ]


def render(docs: Path, discussion: Path | None = None) -> Path:
    """Write docs/results.md (and the plots) from the summaries in docs/results/."""
    summaries = {s.name: load_summary(docs, s) for s in STUDIES}
    domains = [summaries[n] for n in ("math", "searchqa", "chess") if summaries[n] is not None]
    claims = [
        claim_a(domains),
        claim_b(summaries["searchqa"]),
        claim_c(summaries["math"]),
        claim_d(domains),
        claim_e(domains),
    ]
    lines = [
        "# Results at laptop scale",
        "",
        "Generated by `make results` (`whale results`) from the summaries in `docs/results/*.json`; do not "
        "edit by hand. Every number below is what the runs recorded. Model: SmolLM2-135M-Instruct (the "
        "embedded model), LoRA, on 2 CPU cores. The proposer is offline (no LLM writes harness code at this "
        "scale): in the first edition's studies, the mutation proposer, which edits constants; in the "
        "second's, the program proposer, which writes whole mechanisms, judged by the race. Each study "
        "names its edition and the commit its runs ran at. Best test is picked on test (optimistic, as "
        "the paper's best mean@8); "
        "the validation-selected test score is the honest one, and every verdict uses it. Intervals are "
        "95%: they resample seeds, then tasks within each seed, and are widened to Student's t over the "
        "per-seed means (a bootstrap over 3 seeds alone is too narrow); differences are paired by seed and "
        "task, and p-values are Holm-corrected within each family (a claim, a method table). Where fewer "
        "than 10 tasks differ, an exact sign test replaces the bootstrap's p-value. A verdict is "
        "inconclusive whenever the interval covers zero.",
        "",
        "## The paper's claims against what whale measured",
        "",
        md_table(
            ["claim", "paper", "measured", "verdict"],
            [[c.letter, c.paper, "<br>".join(c.measured), c.verdict] for c in claims],
        ),
        "",
    ]
    if discussion is not None and discussion.is_file():
        lines += [discussion.read_text().rstrip(), ""]
    for name in ("math", "searchqa", "chess"):
        s = summaries[name]
        study = next(x for x in STUDIES if x.name == name)
        if s is None:
            lines += [f"## {study.title}", "", not_yet(docs, study), ""]
            continue
        lines += section_comparison(s, docs) + section_bottleneck(s)
    algorithms = summaries["math-algorithms"]
    if algorithms is not None:
        lines += section_comparison(algorithms, docs) + section_weight_steps(algorithms)
    else:
        lines += ["## Math: the weight phase's algorithm", "", "Not run yet (`make results` runs it).", ""]
    lines += section_phases(docs) + section_rate_pick(docs) + section_lr_sweep(docs)
    lines += section_mechanisms([s for s in summaries.values() if s is not None])
    for study in (*BEYOND, *ABLATIONS, *GYM, *PILOTS):
        s = summaries[study.name]
        if s is None:
            lines += [f"## {study.title}", "", not_yet(docs, study), ""]
        else:
            lines += section_comparison(s, docs) + (
                section_pilot(s) if study in PILOTS else section_beyond(s)
            )
    lines += section_run_time([s for s in summaries.values() if s is not None])
    lines += section_plan(docs)
    path = docs / "results.md"
    atomic_write_text(path, "\n".join(lines).rstrip() + "\n")
    return path
