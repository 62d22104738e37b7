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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from whale.core.config import ConfigError, load_config
from whale.core.files import atomic_write_json, atomic_write_text, read_json
from whale.core.stats import PairedDifference
from whale.run.schedule import HARNESS, WEIGHTS
from whale.run.summary import best_val_point
from whale.studies.bottleneck import attribute_gains, gain_per_1000
from whale.studies.compare import (
    RunData,
    best_test_point,
    build_rows,
    headers,
    load_comparison,
    mean_curve,
    paired,
    plot_curves,
    pooled,
    run_all,
    table_cells,
)

SIX = ("whale", "whale-adaptive", "weight-only", "harness-only", "stagewise", "fast-slow")
PAPER_MIN_GAIN = 0.0415  # the paper's smallest reported margin of whale over a baseline (4.15 points)


@dataclass(frozen=True)
class Study:
    """One `whale compare` invocation: a preset, overrides, methods and seeds."""

    name: str  # docs/results/<name>.json
    title: str
    preset: str
    methods: tuple[str, ...]
    seeds: int = 3
    overrides: tuple[str, ...] = ()
    folder: str = ""  # run folder under --runs; studies that share runs name the same folder

    @property
    def runs_folder(self) -> str:
        return self.folder or self.name


PHASE_ABLATION = {  # label -> (E weight steps, I search iterations); (2, 1) is the math study's whale
    "E2-I1": (2, 1),
    "E2-I3": (2, 3),
    "E6-I1": (6, 1),
    "E6-I3": (6, 3),
}

STUDIES: tuple[Study, ...] = (
    Study("math", "Math word problems", "results-math", SIX),
    Study("searchqa", "Multi-hop search QA", "results-searchqa", SIX),
    Study("chess", "Chess mate-in-one", "results-chess", SIX),
    Study(
        "math-algorithms",
        "Math: the weight phase's algorithm (RFT, DPO, GRPO) under whale",
        "results-math",
        ("whale", "whale+dpo", "whale+grpo"),
        folder="math",
    ),
    *(
        Study(
            f"math-phases-{label}",
            f"Math: whale with E={e} weight steps and I={i} search iterations per phase",
            "results-math",
            ("whale",),
            overrides=(f"schedule.weight_steps={e}", f"schedule.search_iters={i}"),
            folder="math" if (e, i) == (2, 1) else f"math-phases-{label}",
        )
        for label, (e, i) in PHASE_ABLATION.items()
    ),
)


# ---- running and summarizing ---------------------------------------------------------------------------


def summary_path(docs: Path, study: Study) -> Path:
    return docs / "results" / f"{study.name}.json"


def run_study(study: Study, runs: Path, docs: Path, console: Console) -> Path:
    """Run (or reuse) the study's comparison, then write its summary; returns the summary's path."""
    cfg = load_config(study.preset, None, list(study.overrides))
    out = runs / study.runs_folder
    lenders = [runs / s.runs_folder for s in STUDIES if s.preset == study.preset]
    run_all(cfg, list(study.methods), study.seeds, out, console, lenders)
    data = load_comparison(out, list(study.methods), study.seeds)
    summary = {
        "study": study.name,
        "title": study.title,
        "preset": study.preset,
        "overrides": list(study.overrides),
        "domain": cfg.domain.name,
        "k": cfg.eval.k,
        "budget_rollouts": cfg.schedule.budget_rollouts,
        "seeds": study.seeds,
        "methods": list(study.methods),
        "runs": [asdict(r) for rs in data.values() for r in rs],
    }
    path = summary_path(docs, study)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, summary)
    return path


@dataclass
class StudySummary:
    study: Study
    meta: dict[str, Any]
    runs: dict[str, list[RunData]] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return int(self.meta["k"])


def load_summary(docs: Path, study: Study) -> StudySummary | None:
    path = summary_path(docs, study)
    if not path.is_file():
        return None
    meta = read_json(path)
    runs: dict[str, list[RunData]] = {m: [] for m in meta["methods"]}
    for r in meta.pop("runs"):
        runs[r["method"]].append(RunData(**r))
    return StudySummary(study, meta, runs)


# ---- measurements behind the claims ----------------------------------------------------------------------


def pooled_at(runs: list[RunData], pick: str) -> dict[str, float]:
    """Per-task test rewards pooled over seeds, at each run's best-test, validation-selected, first or
    last point."""
    choose = {
        "best": best_test_point,
        "selected": best_val_point,
        "first": lambda ps: ps[0],
        "last": lambda ps: ps[-1],
    }[pick]
    return pooled([choose(r.points)["tasks"]["test"] for r in runs])


def diff(s: StudySummary, mine: str, theirs: str, pick: str = "best") -> PairedDifference:
    return paired(pooled_at(s.runs[mine], pick), pooled_at(s.runs[theirs], pick))


def at_floor(s: StudySummary, *methods: str) -> bool:
    """No rollout of these methods solved a test task at any evaluation point: a paired difference of
    zeros with a zero-width interval, which says the task is out of reach, not that the methods tie."""
    return all(
        v == 0 for m in methods for r in s.runs[m] for p in r.points for v in p["tasks"]["test"].values()
    )


FLOOR = "inconclusive (floor: no test task solved by either method at any point)"


def rollouts_to_reach(curve: list[tuple[float, float]], target: float) -> float | None:
    return next((x for x, y in curve if y >= target - 1e-12), None)


def search_acceptance(runs: list[RunData], after_weights: bool) -> tuple[int, int]:
    """(accepted, iterations) over search iterations that ran before any weight step
    (after_weights=False) or after at least one (True)."""
    accepted = total = 0
    for r in runs:
        trained = False
        for e in r.events:
            if e["event"] == "weight_step":
                trained = True
            elif e["event"] == "search_iteration" and trained == after_weights:
                total += 1
                accepted += bool(e.get("accepted"))
    return accepted, total


def unchanged_challengers(runs: list[RunData]) -> tuple[int, int]:
    """(challengers that scored exactly the incumbent's search score, challengers scored): with common
    random numbers an exact tie almost always means the edit changed nothing the model saw."""
    same = total = 0
    for r in runs:
        for e in r.events:
            if e["event"] != "search_iteration" or e.get("incumbent_score") is None:
                continue
            for candidate, score in (e.get("candidates") or {}).items():
                if candidate != e.get("incumbent"):
                    total += 1
                    same += abs(score - e["incumbent_score"]) < 1e-12
    return same, total


def attributed_rates(runs: list[RunData]) -> dict[str, float | None]:
    """Test gain per 1,000 rollouts attributed to weight and harness phases, over all seeds' intervals."""
    intervals = [i for r in runs for i in attribute_gains(r.points, r.events)]
    return gain_per_1000(intervals)


def pts(d: PairedDifference) -> str:
    """A paired difference in points (x100), as the paper reports them."""
    return f"{100 * d.mean_diff:+.1f} pts [{100 * d.ci_low:+.1f}, {100 * d.ci_high:+.1f}]"


def gain_verdict(d: PairedDifference, minimum: float = 0.0) -> str:
    """Positive claim on a paired difference: the 95% CI decides."""
    if d.ci_low > minimum:
        return "reproduced"
    if d.ci_low > 0:
        return "reproduced in direction, smaller than the paper's"
    if d.ci_high < max(minimum, 1e-12):
        return "not reproduced"
    return "inconclusive"


@dataclass
class Claim:
    letter: str
    paper: str
    measured: list[str]
    verdict: str


def combine(verdicts: list[str]) -> str:
    """All domains' verdicts in one; a domain at the floor is no evidence either way."""
    if not verdicts:
        return "not run"
    verdicts = [v for v in verdicts if v != FLOOR] or ["inconclusive"]
    if all(v == "reproduced" for v in verdicts):
        return "reproduced"
    if any(v == "not reproduced" for v in verdicts):
        return "not reproduced"
    if all(v.startswith("reproduced") for v in verdicts):
        return "reproduced in direction, smaller than the paper's"
    return "inconclusive"


def claim_a(domains: list[StudySummary]) -> Claim:
    measured, verdicts = [], []
    for s in domains:
        for base in ("weight-only", "harness-only", "fast-slow"):
            d = diff(s, "whale", base)
            v = FLOOR if at_floor(s, "whale", base) else gain_verdict(d, PAPER_MIN_GAIN)
            measured.append(f"{s.study.name}: whale - {base} best mean@{s.k} {pts(d)}: {v}")
            verdicts.append(v)
    return Claim(
        "a",
        "whale beats weight-only, harness-only and Fast-Slow in best mean@8 by 4.15-24.38 points",
        measured,
        combine(verdicts),
    )


def claim_b(s: StudySummary | None) -> Claim:
    paper = "search QA: harness search reaches weight-only's peak with far fewer rollouts"
    if s is None:
        return Claim("b", paper, ["searchqa study not run"], "not run")
    weights, harness = mean_curve(s.runs["weight-only"]), mean_curve(s.runs["harness-only"])
    peak = max(y for _, y in weights)
    at_peak = rollouts_to_reach(weights, peak)
    reached = rollouts_to_reach(harness, peak)
    d = diff(s, "harness-only", "weight-only")
    line = (
        f"weight-only's seed-mean curve peaks at {peak:.3f} after {at_peak:.0f} rollouts; harness-only "
        + (f"reaches it after {reached:.0f}" if reached is not None else "never reaches it")
        + f"; harness-only - weight-only best mean@{s.k} {pts(d)}"
    )
    if reached is None:
        verdict = "not reproduced"
    elif at_peak and reached <= 0.5 * at_peak:
        verdict = "reproduced"
    else:
        verdict = "inconclusive"
    return Claim("b", paper, [line], verdict)


def fisher_greater(a: int, n: int, b: int, m: int) -> float:
    """One-sided Fisher exact test: P(at least `a` of the a+b successes fall in the first group of n),
    groups of n and m trials. Small p: successes are more frequent in the first group."""
    total, k = n + m, a + b
    if n == 0 or m == 0:
        return 1.0
    tail = sum(math.comb(k, x) * math.comb(total - k, n - x) for x in range(a, min(k, n) + 1))
    return tail / math.comb(total, n)


AFTER_WEIGHTS = ("whale", "whale-adaptive", "stagewise")  # methods whose harness phases follow weight steps


def claim_c(s: StudySummary | None) -> Claim:
    paper = "math: harness search helps only after a weight update"
    if s is None:
        return Claim("c", paper, ["math study not run"], "not run")
    before, before_n = search_acceptance(s.runs["harness-only"], after_weights=False)
    later = [m for m in AFTER_WEIGHTS if m in s.runs]
    counts = [search_acceptance(s.runs[m], after_weights=True) for m in later]
    after, after_n = sum(a for a, _ in counts), sum(n for _, n in counts)
    start_end = paired(pooled_at(s.runs["harness-only"], "last"), pooled_at(s.runs["harness-only"], "first"))
    measured = [
        f"before any weight update (harness-only): {before}/{before_n} search iterations accepted a "
        f"challenger; test at the end - at the start {pts(start_end)}",
        f"after a weight update ({', '.join(later)}): {after}/{after_n} search iterations accepted a "
        f"challenger (" + ", ".join(f"{m} {a}/{n}" for m, (a, n) in zip(later, counts, strict=True)) + ")",
    ]
    p = fisher_greater(after, after_n, before, before_n)
    measured.append(f"acceptance more frequent after than before: one-sided Fisher exact p = {p:.3f}")
    helped_before = before > 0 and start_end.ci_low > 0
    if p < 0.05 and not helped_before:
        verdict = "reproduced"
    elif helped_before:
        verdict = "not reproduced"
    else:
        verdict = "inconclusive"
    return Claim("c", paper, measured, verdict)


def claim_d(domains: list[StudySummary]) -> Claim:
    measured, verdicts = [], []
    for s in domains:
        d = diff(s, "whale", "stagewise")
        stage = mean_curve(s.runs["stagewise"])
        peak = max(y for _, y in stage)
        theirs = rollouts_to_reach(stage, peak)
        mine = rollouts_to_reach(mean_curve(s.runs["whale"]), peak)
        cost = (
            f"whale reaches stagewise's peak {peak:.3f} after {mine:.0f} rollouts, stagewise {theirs:.0f}"
            if mine is not None
            else f"whale never reaches stagewise's peak {peak:.3f} (stagewise: {theirs:.0f} rollouts)"
        )
        accuracy = gain_verdict(d)
        cheaper = mine is not None and theirs is not None and mine <= theirs  # no later, at this cadence
        if at_floor(s, "whale", "stagewise"):
            v, cost = FLOOR, "neither leaves 0"
        elif accuracy == "reproduced" and cheaper:
            v = "reproduced"
        elif accuracy == "not reproduced" or mine is None:
            v = "not reproduced"
        else:
            v = "inconclusive"
        measured.append(f"{s.study.name}: whale - stagewise best mean@{s.k} {pts(d)}; {cost}: {v}")
        verdicts.append(v)
    return Claim(
        "d",
        "small interleaved phases beat stagewise weight-then-harness in accuracy and rollout cost",
        measured,
        combine(verdicts),
    )


def claim_e(domains: list[StudySummary]) -> Claim:
    measured, verdicts = [], []
    for s in domains:
        best, selected = diff(s, "whale-adaptive", "whale"), diff(s, "whale-adaptive", "whale", "selected")
        if at_floor(s, "whale-adaptive", "whale"):
            v = FLOOR
        else:
            v = "no difference detected" if best.ci_low <= 0 <= best.ci_high else "differs"
        measured.append(
            f"{s.study.name}: whale-adaptive - whale best {pts(best)}, validation-selected {pts(selected)}"
            + (f": {v}" if v == FLOOR else "")
        )
        verdicts.append(v)
    verdict = "not run" if not verdicts else "inconclusive"
    measurable = [v for v in verdicts if v != FLOOR]
    if measurable and all(v == "differs" for v in measurable):
        verdict = "differs (see the numbers)"
    return Claim(
        "e",
        "adaptive vs fixed phase lengths (the paper's code ships the adaptive rule for the harness side only "
        "and reports no comparison)",
        measured,
        verdict,
    )


# ---- rendering -------------------------------------------------------------------------------------------


def md_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(lines)


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
        f"took {duration(study_wall(s))} of wall time in all.",
        "",
        md_table(headers(s.k, rows[0].method), [table_cells(r) for r in rows]),
        "",
        f"![{s.study.title}: test mean@{s.k} against rollouts](results/{plot.name})",
        "",
    ]
    reference = rows[0].method
    if len(rows) > 1:
        tests = [
            [f"{reference} - {m}", pts(diff(s, reference, m)), pts(diff(s, reference, m, "selected"))]
            for m in list(s.runs)[1:]
        ]
        out += [
            f"Paired differences (per task, pooled over seeds, 95% bootstrap CI), {reference} minus each:",
            "",
            md_table(["pair", f"best test mean@{s.k}", f"validation-selected test mean@{s.k}"], tests),
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
        "change per 1,000 rollouts attributed to weight and harness phases (split by rollout share between "
        "consecutive evaluation points, all seeds; an attribution, not an ablation).",
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
        d = paired(pooled_at(runs, "best"), pooled_at(reference.runs["whale"], "best"))
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
        "Wall time as each run recorded it (2 CPU cores; the runs of a study ran one after another). A run "
        "that several studies share is run once: `make results` costs the last column's total.",
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
        "embedded model), LoRA, on 2 CPU cores; proposer: the offline mutation proposer (no LLM writes "
        "harness code at this scale). Best test is picked on test (optimistic, as the paper's best mean@8); "
        "the validation-selected test score is the honest one. Intervals are 95% paired bootstrap CIs over "
        "tasks, with each task's score pooled over seeds.",
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
            lines += [f"## {study.title}", "", "Not run yet (`make results` runs it).", ""]
            continue
        lines += section_comparison(s, docs) + section_bottleneck(s)
    algorithms = summaries["math-algorithms"]
    if algorithms is not None:
        lines += section_comparison(algorithms, docs) + section_weight_steps(algorithms)
    else:
        lines += ["## Math: the weight phase's algorithm", "", "Not run yet (`make results` runs it).", ""]
    lines += section_phases(docs)
    lines += section_run_time([s for s in summaries.values() if s is not None])
    path = docs / "results.md"
    atomic_write_text(path, "\n".join(lines).rstrip() + "\n")
    return path


def select_studies(names: list[str] | None) -> list[Study]:
    if not names:
        return list(STUDIES)
    known = {s.name: s for s in STUDIES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"--study: unknown study {unknown[0]!r}; known: {', '.join(known)}")
    return [known[n] for n in names]
