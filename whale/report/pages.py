"""`whale report DIR`: one self-contained HTML page for a run directory or a comparison directory.

    <run>/report.html       header and cost, curves with phases shaded, RFT steps, search iterations,
                            harness lineage, final harness diff, bottleneck view, evaluation points
    <compare>/report.html   the method table, the curves, each method's headline numbers, and relative
                            links to the run reports written into every <method>/seed<N>/ folder

The page has no external resources: plots are matplotlib PNGs embedded as base64 data URIs, the CSS is
inline, and there is no script. Everything read from the run files is escaped (harness code, hypotheses
and reasons are written by LLMs). The run files are only read: a report of a run still in progress
computes its headline numbers in memory instead of writing summary.json.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from whale.core.config import ConfigError
from whale.core.files import atomic_write_text, read_json, read_jsonl
from whale.run.schedule import HARNESS, WEIGHTS
from whale.run.summary import harness_diff, run_summary

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
COLORS = {WEIGHTS: "#4c72b0", HARNESS: "#dd8452"}  # phase shading and bars, in every plot
SEARCH_EVENTS = ("search_iteration", "reeval")
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1100px;
color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;font-size:.9em;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;height:auto}pre{background:#f7f7f7;padding:.8em;overflow-x:auto;font-size:.85em}
.add{color:#1a7f37;background:#e6ffec}.del{color:#cf222e;background:#ffebe9}.hunk{color:#0550ae}
.none{color:#777;font-style:italic}.note{color:#555;font-size:.9em}
ul.tree{list-style:none;padding-left:1.2em;border-left:1px dotted #bbb}ul.tree li{margin:.25em 0}
.status{display:inline-block;padding:0 .4em;border-radius:.3em;background:#eee;font-size:.85em}
.status.accepted,.status.seed,.status.population{background:#dafbe1}
.status.invalid,.status.failed,.status.duplicate{background:#ffebe9}
"""


# ---- loading ---------------------------------------------------------------------------------------


@dataclass
class RunFiles:
    """Everything a run report reads, loaded once."""

    path: Path
    config: dict[str, Any]
    state: dict[str, Any]
    events: list[dict[str, Any]]
    points: list[dict[str, Any]]
    candidates: list[dict[str, Any]]  # meta.json plus `score` and `weights` of the latest evaluation
    summary: dict[str, Any] | None  # before/after/best numbers and the harness diff; None before any eval


def load_run(path: Path) -> RunFiles:
    config_file = path / "config.yaml"
    config = (yaml.safe_load(config_file.read_text()) or {}) if config_file.is_file() else {}
    state = read_json(path / "state.json")
    points = read_jsonl(path / "evals.jsonl")
    candidates = load_candidates(path / "search")
    return RunFiles(
        path,
        config,
        state,
        read_jsonl(path / "events.jsonl"),
        points,
        candidates,
        run_summary(path),
    )


def load_candidates(search: Path) -> list[dict[str, Any]]:
    """Every candidate's meta.json with the mean of its latest evaluation (None when never evaluated)."""
    from whale.search.archive import Archive

    if not (search / "candidates").is_dir():  # Archive() would create it
        return []
    archive, out = Archive(search), []
    for cid in archive.ids():
        meta, history = archive.meta(cid), archive.eval_history(cid)
        meta["score"] = history[-1].mean if history else None
        meta["weights"] = history[-1].weights_version if history else None
        out.append(meta)
    return out


# ---- phases and the bottleneck attribution -------------------------------------------------------------


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
    schedule = config.get("schedule", {})
    method = schedule.get("method", "whale")
    if method in ("harness-only", "stagewise-harness-first"):
        return HARNESS
    if method in ("weight-only", "stagewise"):
        return WEIGHTS
    return schedule.get("start", WEIGHTS)


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

    @property
    def spent(self) -> int:
        return self.weight_rollouts + self.harness_rollouts

    def gain(self, kind: str) -> float:
        """The share of the change attributed to `kind`, in proportion to the rollouts it spent."""
        if not self.spent:
            return 0.0
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
        f" This is an attribution by rollout share, not an ablation; {noisy} of {len(intervals)} "
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


# ---- plots ------------------------------------------------------------------------------------------


def _figure(width: float = 8.0, height: float = 4.2, cols: int = 1) -> tuple[Any, Any]:
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


def _img(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{_e(alt)}">'


def shade_phases(ax: Any, intervals: list[tuple[str, float, float]]) -> None:
    seen = set()
    for kind, a, b in intervals:
        label = None if kind in seen else f"{kind} phase"
        seen.add(kind)
        ax.axvspan(a, b, color=COLORS.get(kind, "#999999"), alpha=0.12, label=label, lw=0)


def plot_curves(run: RunFiles) -> str:
    """Test and validation mean@k with CI bands against budget rollouts, phases shaded."""
    fig, ax = _figure()
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
    fig, ax = _figure(height=3.6)
    xs = [e["step"] for e in steps]
    ax.plot(xs, [e["train_reward"] for e in steps], marker="o", label="train reward (mean over rollouts)")
    ax.plot(
        xs,
        [e["kept"] / e["total"] if e.get("total") else 0.0 for e in steps],
        marker="s",
        label="kept fraction (kept / sampled)",
    )
    ax.set_xlabel("weight step")
    integer_x(ax, xs)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return png_uri(fig)


def plot_search(iterations: list[dict[str, Any]]) -> str:
    """Every evaluated candidate's search-set score per iteration; accepted ones starred."""
    fig, ax = _figure(height=3.6)
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
    fig, (left, right) = _figure(width=9.0, height=3.6, cols=2)
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


# ---- HTML helpers -------------------------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _none(what: str = "none") -> str:
    return f'<p class="none">{_e(what)}</p>'


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}">\n<h2>{_e(title)}</h2>\n{body}\n</section>'


def _table(head: list[str], rows: list[list[str]], numeric: set[int] | frozenset[int] = frozenset()) -> str:
    """A table; cells are escaped here. Columns whose index is in `numeric` are right-aligned."""
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    num = ' class="num"'
    lines = [
        "<tr>" + "".join(f"<td{num if j in numeric else ''}>{_e(c)}</td>" for j, c in enumerate(r)) + "</tr>"
        for r in rows
    ]
    return f"<table>\n<tr>{th}</tr>\n" + "".join(line + "\n" for line in lines) + "</table>"


def _facts(rows: list[list[str]]) -> str:
    """A two-column table of label and value; cells are escaped here."""
    body = "".join(f'<tr><th scope="row">{_e(k)}</th><td>{_e(v)}</td></tr>\n' for k, v in rows)
    return f"<table>\n{body}</table>"


def _ci(score: dict[str, Any] | None) -> str:
    if not score:
        return "-"
    return f"{score['mean']:.3f} [{score['ci_low']:.3f}, {score['ci_high']:.3f}]"


def _duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}h {rest // 60:02d}m" if hours else f"{rest // 60}m {rest % 60:02d}s"


def page(title: str, sections: list[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<h1>{_e(title)}</h1>\n"
        + "\n".join(sections)
        + "\n</body>\n</html>\n"
    )


def run_end(run: RunFiles) -> float:
    """Budget rollouts spent so far."""
    b = run.state.get("budget", {})
    spent = [b.get("train_rollouts", 0) + b.get("search_rollouts", 0)]
    spent += [e["rollouts"] for e in run.events if "rollouts" in e] + [p["rollouts"] for p in run.points]
    return float(max(spent))


# ---- run report sections -------------------------------------------------------------------------------


def section_summary(run: RunFiles) -> str:
    c, s, st = run.config, run.summary, run.state
    status = "finished" if st.get("finished") else "in progress (not finished)"
    facts = [
        ["method", c.get("schedule", {}).get("method", "?")],
        ["domain", c.get("domain", {}).get("name", "?")],
        ["model", c.get("model", {}).get("name", "?")],
        ["run", f"{c.get('name', '?')}, seed {c.get('seed', '?')}, {status}"],
        [
            "units",
            f"{st.get('weight_steps', 0)} weight steps, {st.get('search_iters', 0)} search iterations, "
            f"{st.get('eval_points', 0)} evaluation points",
        ],
        ["final harness", str(st.get("incumbent", "?"))],
    ]
    if s is None:
        headline = _none("none: no evaluation point yet")
    else:
        k = s["before"].get("k", "k")
        headline = _table(
            ["", f"test mean@{k} [95% CI]", "point"],
            [
                ["before (first point)", _ci(s["before"]), str(run.points[0]["point"])],
                ["after (last point)", _ci(s["after"]), str(run.points[-1]["point"])],
                ["best test (optimistic: picked on test)", _ci(s["best_test"]), str(s["best_test"]["point"])],
                [
                    "test at best validation (honest)",
                    _ci(s["test_at_best_val"]),
                    str(s["test_at_best_val"]["point"]),
                ],
            ],
        )
    return _section("summary", "Summary", _facts(facts) + "\n" + headline)


def section_cost(run: RunFiles) -> str:
    b = run.state.get("budget", {})
    train, search = b.get("train_rollouts", 0), b.get("search_rollouts", 0)
    rows = [
        ["budget rollouts (train + search)", f"{train + search} of {b.get('limit_rollouts', '?')}"],
        ["train rollouts (RFT)", str(train)],
        ["search rollouts (harness search)", str(search)],
        ["eval rollouts (validation + test, not charged)", str(b.get("eval_rollouts", 0))],
        ["generated tokens", f"{b.get('generated_tokens', 0):,}"],
        ["model calls", f"{b.get('model_calls', 0):,}"],
        ["wall time", _duration(b.get("wall_s", 0.0))],
    ]
    kind = run.config.get("proposer", {}).get("kind", "mutation")
    usage = run.state.get("proposer_usage")
    if usage:
        spent = (
            f"{usage.get('sessions', 0)} sessions, {usage.get('tokens', 0):,} tokens, "
            f"${usage.get('usd', 0.0):.2f}, {_duration(usage.get('seconds', 0.0))}"
        )
        rows.append([f"proposer ({kind})", spent])
    else:
        rows.append([f"proposer ({kind})", "no usage recorded"])
    if run.state.get("proposer_spent"):
        rows.append(["proposer stopped", run.state["proposer_spent"]])
    return _section("cost", "Budget and cost", _facts(rows))


def section_curves(run: RunFiles) -> str:
    if not run.points:
        return _section("curves", "Validation and test curves", _none())
    note = (
        f'<p class="note">Shaded: <span style="color:{COLORS[WEIGHTS]}">weight phases</span> and '
        f'<span style="color:{COLORS[HARNESS]}">harness phases</span>, by the rollouts they spent.</p>'
    )
    body = _img(plot_curves(run), "test and validation mean@k against budget rollouts") + note
    return _section("curves", "Validation and test curves", body)


def _number(value: Any, digits: int = 4) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "-"


def examples_per_phase(steps: list[dict[str, Any]]) -> list[list[str]]:
    """Rows (weight phase, harness, training examples, steps): which harness version the weights learned
    under in each phase (runs before the per-harness count was logged have none)."""
    counts: dict[tuple[int, str], list[int]] = {}
    for e in steps:
        for harness, n in (e.get("examples_by_harness") or {}).items():
            entry = counts.setdefault((e.get("phase", 0), harness), [0, 0])
            entry[0] += n
            entry[1] += 1
    return [[str(phase), harness, str(n), str(k)] for (phase, harness), (n, k) in sorted(counts.items())]


def section_rft(run: RunFiles) -> str:
    steps = [e for e in run.events if e.get("event") == "weight_step"]
    algorithm = run.config.get("weights", {}).get("algorithm", "rft")
    title = f"{algorithm.upper()} weight steps"
    if not steps:
        return _section("rft", title, _none())
    rows = [
        [
            str(e["step"]),
            f"{e['train_reward']:.3f}",
            f"{e['kept']}/{e['total']}",
            str(e.get("examples", "")),
            _number(e.get("loss")),
            _number(e.get("kl"), 5),
            _number(e.get("margin") if algorithm == "dpo" else e.get("mean_abs_advantage")),
            str(e.get("rollouts", "")),
        ]
        for e in steps
    ]
    signal = {"dpo": "margin", "grpo": "mean |advantage|"}.get(algorithm, "-")
    head = ["step", "train reward", "kept", "examples", "loss", "KL to phase start", signal, "rollouts after"]
    table = _table(head, rows, {1, 3, 4, 5, 6, 7})
    per_phase = examples_per_phase(steps)
    if per_phase:
        note = '<p class="note">Training examples per weight phase and harness version.</p>'
        table += note + _table(["weight phase", "harness", "examples", "steps"], per_phase, {0, 2, 3})
    return _section("rft", title, _img(plot_rft(steps), "train reward per weight step") + table)


def section_search(run: RunFiles) -> str:
    iterations = [e for e in run.events if e.get("event") == "search_iteration"]
    if not iterations:
        return _section("search", "Harness search", _none())
    rows = [
        [
            str(e["iteration"]),
            str(e.get("incumbent", "")),
            f"{e.get('incumbent_score', 0.0):.3f}",
            "yes" if e.get("accepted") else "no",
            ", ".join(f"{cid} {m:.3f}" for cid, m in (e.get("candidates") or {}).items()) or "-",
            ", ".join(f"{cid}: {why}" for cid, why in (e.get("failed") or {}).items()) or "-",
            str(e.get("reason", e.get("proposal", ""))),
        ]
        for e in iterations
    ]
    head = ["iteration", "incumbent", "incumbent score", "accepted", "candidates", "failed", "reason"]
    table = _table(head, rows, {2})
    body = _img(plot_search(iterations), "search-set score of every candidate per iteration") + table
    return _section("search", "Harness search", body)


def lineage_html(candidates: list[dict[str, Any]], final: str | None) -> str:
    """Nested lists parent -> child, built without recursion (lineages can be long chains)."""
    known = {c["id"] for c in candidates}
    children: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for c in candidates:
        children[c.get("parent") if c.get("parent") in known else None].append(c)
    out = ['<ul class="tree">']
    stack: list[Any] = [iter(children[None])]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            out.append("</ul>")
            if stack:  # the list just closed was a child list: close its parent's item
                out.append("</li>")
            continue
        score = "not evaluated" if node["score"] is None else f"{node['score']:.3f} ({node['weights']})"
        status = str(node.get("status", "?"))
        mark = " <strong>(final)</strong>" if node["id"] == final else ""
        reason = f' <span class="note">{_e(node["reason"])}</span>' if node.get("reason") else ""
        out.append(
            f'<li id="cand-{_e(node["id"])}"><code>{_e(node["id"])}</code>{mark} '
            f'<span class="status {_e(status)}">{_e(status)}</span> score {_e(score)} '
            f"&middot; {_e(node.get('proposer', ''))}: {_e(node.get('hypothesis', ''))}{reason}"
        )
        if children[node["id"]]:
            out.append('<ul class="tree">')
            stack.append(iter(children[node["id"]]))
        else:
            out.append("</li>")
    return "\n".join(out)


def section_lineage(run: RunFiles) -> str:
    if not run.candidates:
        return _section("lineage", "Harness lineage", _none())
    note = '<p class="note">Score: search-set mean of the latest evaluation (weights version).</p>'
    tree = lineage_html(run.candidates, run.state.get("incumbent"))
    return _section("lineage", "Harness lineage", note + tree)


def diff_html(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        cls = ""
        if line.startswith(("+++", "---")):
            cls = "hunk"
        elif line.startswith("+"):
            cls = "add"
        elif line.startswith("-"):
            cls = "del"
        elif line.startswith("@@"):
            cls = "hunk"
        lines.append(f'<span class="{cls}">{_e(line)}</span>' if cls else _e(line))
    return "<pre>" + "\n".join(lines) + "</pre>"


def section_diff(run: RunFiles) -> str:
    s = run.summary
    diff = s["harness_diff"] if s else harness_diff(run.path / "search", run.state.get("incumbent", "c0000"))
    final = s["final_harness"] if s else run.state.get("incumbent", "c0000")
    if not diff:
        return _section("diff", "Final harness against the seed", _none("none: the seed harness was kept"))
    return _section("diff", f"Final harness {final} against the seed", diff_html(diff))


def section_bottleneck(run: RunFiles) -> str:
    title = "Bottleneck: accuracy gained per 1,000 rollouts, weights vs harness"
    intervals = attribute_gains(run.points, run.events)
    if not intervals:
        return _section("bottleneck", title, _none("none: fewer than two evaluation points"))
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
    ]
    rates = gain_per_1000(intervals)
    totals = _table(
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
        '<p class="note">The test mean@k change between two consecutive evaluation points is split between '
        "weight phases and harness phases in proportion to the budget rollouts each spent in between "
        "(RFT steps vs search iterations and re-evaluations).</p>"
    )
    body = (
        f"<p><strong>{_e(bottleneck_verdict(intervals))}</strong></p>\n{explain}\n"
        + _img(plot_bottleneck(intervals), "attributed test change by phase kind")
        + "\n"
        + totals
        + "\n"
        + _table(head, rows, set(range(1, 8)))
    )
    return _section("bottleneck", title, body)


def section_points(run: RunFiles) -> str:
    if not run.points:
        return _section("points", "Evaluation points", _none())
    rows = [
        [
            str(p["point"]),
            str(p.get("label", "")),
            str(p.get("phase", "")),
            str(p.get("weights", "")),
            str(p.get("harness", "")),
            str(p["rollouts"]),
            _ci(p["val"]),
            _ci(p["test"]),
            f"{p['test'].get('pass_at_k', 0.0):.3f}",
            f"{p['test'].get('maj_at_k', 0.0):.3f}",
            _duration(p.get("wall_s", 0.0)),
        ]
        for p in run.points
    ]
    k = run.points[0]["test"].get("k", "k")
    head = [
        "point",
        "label",
        "next phase",
        "weights",
        "harness",
        "rollouts",
        f"val mean@{k} [95% CI]",
        f"test mean@{k} [95% CI]",
        f"test pass@{k}",
        f"test maj@{k}",
        "wall",
    ]
    return _section("points", "Evaluation points", _table(head, rows, {0, 5, 6, 7, 8, 9, 10}))


def run_report(path: Path) -> str:
    run = load_run(path)
    method = run.config.get("schedule", {}).get("method", "run")
    title = f"whale report: {run.config.get('name', path.name)} ({method})"
    sections = [
        section_summary(run),
        section_cost(run),
        section_curves(run),
        section_rft(run),
        section_search(run),
        section_lineage(run),
        section_diff(run),
        section_bottleneck(run),
        section_points(run),
    ]
    return page(title, sections)


# ---- comparison report ---------------------------------------------------------------------------------


def method_table(data: dict[str, Any]) -> str:
    """compare.json's rows, formatted as compare.md formats them."""
    from whale.core.stats import PairedDifference
    from whale.studies.compare import MethodRow, Score, headers, table_cells

    rows = []
    for d in data["rows"]:
        diff = d.get("vs_reference")
        row = MethodRow(
            **{
                **d,
                "best_test": Score(**d["best_test"]),
                "selected_test": Score(**d["selected_test"]),
                "vs_reference": PairedDifference(**diff) if diff else None,
            }
        )
        rows.append(table_cells(row))
    return _table(headers(data["k"], data["rows"][0]["method"]), rows, set(range(1, 9)))


def plot_compare(path: Path, methods: list[str], seeds: int) -> str:
    """compare.png when present, else the test curves re-plotted from the run folders."""
    png = path / "compare.png"
    if png.is_file() and png.read_bytes()[:8] == PNG_MAGIC:
        return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")
    fig, ax = _figure(height=5.0)
    for index, method in enumerate(methods):
        for i in range(seeds):
            points = read_jsonl(path / method / f"seed{i}" / "evals.jsonl")
            ax.plot(
                [p["rollouts"] for p in points],
                [p["test"]["mean"] for p in points],
                marker="o",
                color=f"C{index % 10}",
                label=method if i == 0 else None,
            )
    ax.set_xlabel("budget rollouts spent (training + search)")
    ax.set_ylabel("test mean@k")
    ax.grid(alpha=0.3)
    ax.legend()
    return png_uri(fig)


def method_runs(path: Path, method: str, seeds: int) -> str:
    """One method's headline numbers per seed, each run's report written and linked relatively."""
    rows = []
    for i in range(seeds):
        folder = path / method / f"seed{i}"
        if not (folder / "state.json").is_file():
            rows.append([f"seed{i}", "missing", "", "", "", "", "", ""])
            continue
        write_report(folder)
        state = read_json(folder / "state.json")
        s = run_summary(folder)
        b = state.get("budget", {})
        rows.append(
            [
                f'<a href="{_e(quote(f"{method}/seed{i}/report.html"))}">seed{i}</a>',
                *[
                    _e(_ci(s[key]) if s else "-")
                    for key in ("before", "after", "best_test", "test_at_best_val")
                ],
                _e(str(b.get("train_rollouts", 0) + b.get("search_rollouts", 0))),
                _e(f"{b.get('generated_tokens', 0):,}"),
                _e(_duration(b.get("wall_s", 0.0))),
            ]
        )
    head = ["run report", "before", "after", "best test", "test at best val", "rollouts", "tokens", "wall"]
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    # the cells are escaped above: the first one holds a link
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>\n" for r in rows)
    table = f"<table>\n<tr>{th}</tr>\n{body}</table>"
    return f'<div id="method-{_e(method)}">\n<h3>{_e(method)}</h3>\n{table}\n</div>'


def compare_report(path: Path) -> str:
    data = read_json(path / "compare.json")
    rows = data.get("rows") or []
    methods, seeds = [r["method"] for r in rows], int(data.get("seeds", 1))
    if not rows:
        return page(f"whale comparison: {path.name}", [_section("methods", "Methods", _none())])
    k = data.get("k", "k")
    note = (
        f'<p class="note">{seeds} seed(s) per method; scores pooled over seeds per task. Best test is picked '
        f"on test (optimistic); the validation-selected test mean@{k} is the honest number; the paired "
        f"difference is against {_e(methods[0])}.</p>"
    )
    sections = [
        _section("methods", "Methods", method_table(data) + note),
        _section("curves", "Test curves", _img(plot_compare(path, methods, seeds), "test mean@k per method")),
        _section("runs", "Runs per method", "\n".join(method_runs(path, m, seeds) for m in methods)),
    ]
    return page(f"whale comparison: {path.name}", sections)


# ---- entry point ---------------------------------------------------------------------------------------


def write_report(path: Path) -> Path:
    """Write <path>/report.html for a run directory (state.json) or a comparison directory (compare.json)
    and return its path; anything else is a ConfigError."""
    path = Path(path)
    if (path / "compare.json").is_file():
        text = compare_report(path)
    elif (path / "state.json").is_file():
        text = run_report(path)
    else:
        raise ConfigError(f"{path}: not a whale run (no state.json) or comparison (no compare.json)")
    out = path / "report.html"
    atomic_write_text(out, text)
    return out
