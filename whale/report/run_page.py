"""`whale report DIR`: one self-contained HTML page for a run directory or a comparison directory.

    <run>/report.html       header and cost, curves with phases shaded, RFT steps, search iterations,
                            harness lineage, final harness diff, bottleneck view, evaluation points
    <compare>/report.html   the method table, the curves, each method's headline numbers, and relative
                            links to the run reports written into every <method>/seed<N>/ folder

The page has no external resources: plots are matplotlib PNGs embedded as base64 data URIs, the CSS is
inline, and there is no script (traces.py adds per-task results, a trace viewer of nested <details>,
the accepted diffs and the config). Everything read from the run files is escaped (harness code, hypotheses
and reasons are written by LLMs). The run files are only read: a report of a run still in progress
computes its headline numbers in memory instead of writing summary.json.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from whale.report.bottleneck_view import section_bottleneck
from whale.report.html import (
    ci_text,
    diff_html,
    duration_text,
    esc,
    facts_html,
    none_html,
    page,
    section_html,
    table_html,
)
from whale.report.plots import (
    COLORS,
    img_html,
    plot_curves,
    plot_rft,
    plot_search,
)
from whale.report.run_files import RunFiles, load_run
from whale.report.traces import section_accepted, section_config, section_tasks, section_traces
from whale.run.rundir import SEARCH
from whale.run.schedule import HARNESS, WEIGHTS
from whale.run.summary import harness_diff

# ---- run report sections -------------------------------------------------------------------------------


def domain_label(domain: dict) -> str:
    """reasoning-gym/spell_backward for a dataset-backed domain, else the domain's name."""
    dataset = (domain.get("options") or {}).get("dataset")
    return f"{domain.get('name', '?')}/{dataset}" if isinstance(dataset, str) else domain.get("name", "?")


def section_summary(run: RunFiles) -> str:
    c, s, st = run.config, run.summary, run.state
    status = "finished" if st.get("finished") else "in progress (not finished)"
    facts = [
        ["method", c.get("schedule", {}).get("method", "?")],
        ["domain", domain_label(c.get("domain", {}))],
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
        headline = none_html("none: no evaluation point yet")
    else:
        k = s["before"].get("k", "k")
        headline = table_html(
            ["", f"test mean@{k} [95% CI]", "point"],
            [
                ["before (first point)", ci_text(s["before"]), str(run.points[0]["point"])],
                ["after (last point)", ci_text(s["after"]), str(run.points[-1]["point"])],
                [
                    "best test (optimistic: picked on test)",
                    ci_text(s["best_test"]),
                    str(s["best_test"]["point"]),
                ],
                [
                    "test at best validation (honest)",
                    ci_text(s["test_at_best_val"]),
                    str(s["test_at_best_val"]["point"]),
                ],
            ],
        )
    return section_html("summary", "Summary", facts_html(facts) + "\n" + headline)


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
        ["wall time", duration_text(b.get("wall_s", 0.0))],
    ]
    kind = run.config.get("proposer", {}).get("kind", "mutation")
    usage = run.state.get("proposer_usage")
    if usage:
        spent = (
            f"{usage.get('sessions', 0)} sessions, {usage.get('tokens', 0):,} tokens, "
            f"${usage.get('usd', 0.0):.2f}, {duration_text(usage.get('seconds', 0.0))}"
        )
        rows.append([f"proposer ({kind})", spent])
    else:
        rows.append([f"proposer ({kind})", "no usage recorded"])
    if run.state.get("proposer_spent"):
        rows.append(["proposer stopped", run.state["proposer_spent"]])
    return section_html("cost", "Budget and cost", facts_html(rows))


def section_curves(run: RunFiles) -> str:
    if not run.points:
        return section_html("curves", "Validation and test curves", none_html())
    note = (
        f'<p class="note">Shaded: <span style="color:{COLORS[WEIGHTS]}">weight phases</span> and '
        f'<span style="color:{COLORS[HARNESS]}">harness phases</span>, by the rollouts they spent.</p>'
    )
    body = img_html(plot_curves(run), "test and validation mean@k against budget rollouts") + note
    return section_html("curves", "Validation and test curves", body)


def _number(value: Any, digits: int = 4, missing: str = "-") -> str:
    """A number to `digits` places; None or NaN (a step that trained on nothing) prints `missing`."""
    if isinstance(value, int | float) and value == value:
        return f"{value:.{digits}f}"
    return missing


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
        return section_html("rft", title, none_html())
    signal = {"dpo": "margin", "grpo": "mean |advantage|"}.get(algorithm)  # RFT has no such column
    rows = [
        [
            str(e["step"]),
            f"{e['train_reward']:.3f}",
            f"{e['kept']}/{e['total']}",
            str(e.get("examples", "")),
            _number(e.get("loss"), missing="no update"),
            _number(e.get("kl"), 5),
            *(
                [_number(e.get("margin") if algorithm == "dpo" else e.get("mean_abs_advantage"))]
                if signal
                else []
            ),
            str(e.get("rollouts", "")),
        ]
        for e in steps
    ]
    head = ["step", "train reward", "kept", "examples", "loss", "KL to phase start"]
    head += [signal, "rollouts after"] if signal else ["rollouts after"]
    steps_table = table_html(head, rows, set(range(1, len(head))) - {2})
    per_phase = examples_per_phase(steps)
    if per_phase:
        note = '<p class="note">Training examples per weight phase and harness version.</p>'
        steps_table += note + table_html(
            ["weight phase", "harness", "examples", "steps"], per_phase, {0, 2, 3}
        )
    steps_table += rescue_table(steps)
    return section_html("rft", title, img_html(plot_rft(steps), "train reward per weight step") + steps_table)


def rescue_table(steps: list[dict[str, Any]]) -> str:
    """weights.rescue, per step: the zero-signal tasks, how many a rescue harness passed, and by which."""
    rescued = [(e["step"], e["rescue"]) for e in steps if e.get("rescue")]
    if not rescued:
        return ""
    rows = [
        [
            str(step),
            r["mode"],
            str(r["zero_signal"]),
            str(r["tried"]),
            str(r["rescued"]),
            ", ".join(f"{h} {n}" for h, n in r["by_harness"].items()) or "-",
            str(r["rollouts"]),
            str(r["examples"]),
            ", ".join(f"{kind} {n}" for kind, n in (r.get("targets") or {}).items()) or "-",
            ", ".join(f"{why} {n}" for why, n in r["skipped"].items()) or "-",
        ]
        for step, r in rescued
    ]
    note = (
        '<p class="note">Rescue: the tasks whose rollouts under the incumbent all failed, run again under'
        " other harnesses (rescue rollouts are charged to the budget and marked in rollouts/train.jsonl)."
        " Tasks rescued per harness; distill's examples by the target a replay of the incumbent confirmed,"
        " and its skips by reason.</p>"
    )
    head = ["step", "mode", "zero-signal tasks", "tried", "rescued", "by harness", "rollouts", "examples"]
    return note + table_html([*head, "distill targets", "skipped"], rows, {0, 2, 3, 4, 6, 7})


def section_search(run: RunFiles) -> str:
    iterations = [e for e in run.events if e.get("event") == "search_iteration"]
    if not iterations:
        return section_html("search", "Harness search", none_html())
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
    iterations_table = table_html(head, rows, {2})
    body = (
        img_html(plot_search(iterations), "search-set score of every candidate per iteration")
        + iterations_table
    )
    return section_html("search", "Harness search", body)


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
        reason = f' <span class="note">{esc(node["reason"])}</span>' if node.get("reason") else ""
        out.append(
            f'<li id="cand-{esc(node["id"])}"><code>{esc(node["id"])}</code>{mark} '
            f'<span class="status {esc(status)}">{esc(status)}</span> score {esc(score)} '
            f"&middot; {esc(node.get('proposer', ''))}: {esc(node.get('hypothesis', ''))}{reason}"
        )
        if children[node["id"]]:
            out.append('<ul class="tree">')
            stack.append(iter(children[node["id"]]))
        else:
            out.append("</li>")
    return "\n".join(out)


def section_lineage(run: RunFiles) -> str:
    if not run.candidates:
        return section_html("lineage", "Harness lineage", none_html())
    note = '<p class="note">Score: search-set mean of the latest evaluation (weights version).</p>'
    tree = lineage_html(run.candidates, run.state.get("incumbent"))
    return section_html("lineage", "Harness lineage", note + tree)


def section_diff(run: RunFiles) -> str:
    s = run.summary
    diff = s["harness_diff"] if s else harness_diff(run.path / SEARCH, run.state.get("incumbent", "c0000"))
    final = s["final_harness"] if s else run.state.get("incumbent", "c0000")
    if not diff:
        return section_html(
            "diff", "Final harness against the seed", none_html("none: the seed harness was kept")
        )
    return section_html("diff", f"Final harness {final} against the seed", diff_html(diff))


def section_points(run: RunFiles) -> str:
    if not run.points:
        return section_html("points", "Evaluation points", none_html())
    rows = [
        [
            str(p["point"]),
            str(p.get("label", "")),
            str(p.get("phase", "")),
            str(p.get("weights", "")),
            str(p.get("harness", "")),
            str(p["rollouts"]),
            ci_text(p["val"]),
            ci_text(p["test"]),
            f"{p['test'].get('pass_at_k', 0.0):.3f}",
            f"{p['test'].get('maj_at_k', 0.0):.3f}",
            duration_text(p.get("wall_s", 0.0)),
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
    return section_html("points", "Evaluation points", table_html(head, rows, {0, 5, 6, 7, 8, 9, 10}))


def section_phases(run: RunFiles) -> str:
    """Every phase switch, the schedule's reason and the numbers it decided on (whale-gain's draws)."""
    title = "Phase switches"
    switches = [e for e in run.events if e.get("event") == "phase_switch"]
    if not switches:
        return section_html("phases", title, none_html("none: one phase for the whole run"))
    rows = [
        [
            str(e.get("rollouts", "")),
            f"{e.get('from', '?')} \u2192 {e.get('to', '?')}",
            str(e.get("length", "")),
            str(e.get("reason", "")),
            json.dumps(e.get("signals") or {}, sort_keys=True)[:400],
        ]
        for e in switches
    ]
    head = ["rollouts", "switch", "units in the phase", "reason", "signals"]
    return section_html("phases", title, table_html(head, rows, {0, 2}))


def run_report(path: Path) -> str:
    run = load_run(path)
    method = run.config.get("schedule", {}).get("method", "run")
    title = f"whale report: {path.resolve().name} ({run.config.get('name', '?')} preset, {method})"
    sections = [
        section_summary(run),
        section_cost(run),
        section_curves(run),
        section_rft(run),
        section_search(run),
        section_lineage(run),
        section_diff(run),
        section_bottleneck(run),
        section_phases(run),
        section_points(run),
        section_accepted(run),
        section_tasks(run),
        section_traces(run),
        section_config(run),
    ]
    return page(title, sections)
