"""The rollouts behind the report's numbers: per-task results at every evaluation point, a trace viewer
(every model call's messages and reply, every tool call, the answer and its verdict), each accepted
harness's diff against its parent, and the config. Still no script: the viewer filters by split,
evaluation point or candidate, and outcome through nested <details>, and everything is escaped."""

from __future__ import annotations

import difflib
from collections import defaultdict
from typing import Any

import yaml

from whale.core.files import read_jsonl
from whale.report.html import diff_html, esc, none_html, section_html, table_html
from whale.report.run_files import RunFiles
from whale.run.rundir import SEARCH, RunDir

SPLITS = ("test", "val")
SHOWN_PER_GROUP = 40  # rollouts written out per (split, point or candidate, outcome); the files hold all
SAMPLES_SHOWN = 2  # of each task's samples, the first ones
TEXT_CHARS = 4000  # of one message or reply


def outcome(row: dict[str, Any]) -> str:
    if row.get("error"):
        return "error"
    return (
        "solved" if (row.get("reward") or 0.0) >= 1.0 else "partly solved" if row.get("reward") else "failed"
    )


def section_tasks(run: RunFiles) -> str:
    """Each task's mean reward over its samples, at every evaluation point, on test and validation."""
    title = "Per-task results at each evaluation point"
    if not run.points:
        return section_html("tasks", title, none_html())
    parts = []
    for split in SPLITS:
        by_task: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for p in run.points:
            for row in RunDir(run.path).eval_rows(p["point"], split):
                by_task[row["task_id"]][p["point"]].append(float(row.get("reward") or 0.0))
        if not by_task:
            continue
        head = ["task", *(f"point {p['point']} ({p['weights']}, {p['harness']})" for p in run.points)]
        rows = [
            [task, *(f"{sum(v) / len(v):.2f}" if (v := scores.get(p["point"])) else "-" for p in run.points)]
            for task, scores in sorted(by_task.items(), key=lambda kv: _task_order(kv[0]))
        ]
        parts.append(f"<h3>{esc(split)}</h3>\n" + table_html(head, rows, set(range(1, len(head)))))
    note = '<p class="note">Mean reward over each task\'s samples (every rollout: evals/NNN/SPLIT.jsonl).</p>'
    return section_html("tasks", title, note + "\n" + "\n".join(parts) if parts else none_html())


def _task_order(task_id: str) -> tuple[str, int]:
    stem, _, number = task_id.rpartition("-")
    return (stem, int(number)) if number.isdigit() else (task_id, 0)


def call_marks(call: dict[str, Any]) -> str:
    """What the harness said of a call's training: train=False, or its llm.credit (docs/weights.md)."""
    marks = ["train=False"] if call.get("train") is False else []
    if call.get("credit") is not None:
        marks.append("credited by the harness" if call["credit"] else "not credited by the harness")
    return f" ({', '.join(marks)})" if marks else ""


def rollout_html(row: dict[str, Any], opened: bool = False) -> str:
    verdict = f"error: {row['error']}" if row.get("error") else f"reward {row.get('reward')}"
    summary = f"{row.get('task_id')} sample {row.get('sample')} ({row.get('harness_id')}): {verdict}"
    parts = []
    for i, call in enumerate(row.get("calls") or []):
        messages = "".join(
            f'<p class="note">{esc(m.get("role", "?"))}</p><pre>{esc(_cut(m.get("content", "")))}</pre>'
            for m in call.get("messages") or []
        )
        parts.append(
            f'<h4>model call {i}{esc(call_marks(call))}</h4>{messages}<p class="note">reply</p>'
            f"<pre>{esc(_cut(call.get('text', '')))}</pre>"
        )
    for call in row.get("tool_calls") or []:
        result = f"error: {call.get('error')}" if call.get("error") else _cut(str(call.get("result")))
        args = ", ".join(
            [
                *map(repr, call.get("args") or []),
                *(f"{k}={v!r}" for k, v in (call.get("kwargs") or {}).items()),
            ]
        )
        parts.append(f"<p>tool {esc(call.get('name'))}({esc(_cut(args))}) &rarr; {esc(result)}</p>")
    parts.append(f"<p>answer: <code>{esc(_cut(str(row.get('answer'))))}</code></p>")
    start = '<details class="rollout" open>' if opened else '<details class="rollout">'
    return f"{start}<summary>{esc(summary)}</summary>\n" + "\n".join(parts) + "\n</details>"


def _cut(text: str) -> str:
    return (
        text
        if len(text) <= TEXT_CHARS
        else text[:TEXT_CHARS] + f"... ({len(text) - TEXT_CHARS} more characters)"
    )


def group_html(label: str, rows: list[dict[str, Any]], source: str, opened: bool = False) -> str:
    """One split at one point (or one candidate), its rollouts grouped by outcome; `opened` shows the
    first rollout of the first outcome, so the page opens on one trace."""
    shown = [r for r in rows if int(r.get("sample") or 0) < SAMPLES_SHOWN]
    by_outcome: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in shown:
        by_outcome[outcome(row)].append(row)
    counts = ", ".join(
        f"{k} {sum(outcome(r) == k for r in rows)}" for k in ("solved", "partly solved", "failed", "error")
    )
    inner = []
    for kind in ("solved", "partly solved", "failed", "error"):
        group = by_outcome.get(kind, [])
        if group:
            more = len(group) - SHOWN_PER_GROUP
            tail = f'<p class="note">{more} more in {esc(source)}</p>' if more > 0 else ""
            first = opened and not inner
            body = "\n".join(rollout_html(r, first and i == 0) for i, r in enumerate(group[:SHOWN_PER_GROUP]))
            start = "<details open>" if first else "<details>"
            inner.append(
                f"{start}<summary>{esc(kind)} ({len(group)} shown)</summary>\n{body}{tail}\n</details>"
            )
    start = "<details open>" if opened else "<details>"
    head = f"{start}<summary>{esc(label)}: {len(rows)} rollouts ({counts})</summary>\n"
    return head + "\n".join(inner) + "\n</details>"


def section_traces(run: RunFiles) -> str:
    """Evaluation rollouts by split and point, then search rollouts by candidate, each by outcome."""
    title = "Rollouts (trace viewer)"
    groups = []
    for split in SPLITS:
        for p in run.points:
            rows = RunDir(run.path).eval_rows(p["point"], split)
            if rows:
                agent = f"weights {p['weights']}, harness {p['harness']}"
                label = f"{split}, point {p['point']} ({p['label']}; {agent})"
                source = f"evals/{p['point']:03d}/{split}.jsonl"
                groups.append(group_html(label, rows, source, opened=not groups))
    for meta in run.candidates:
        folder = run.path / SEARCH / "candidates" / meta["id"] / "traces"
        for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
            what = f"{meta.get('status')}: {meta.get('hypothesis', '')[:80]}"
            label = f"search, candidate {meta['id']} ({what}) under {path.stem}"
            groups.append(
                group_html(label, read_jsonl(path), f"search/candidates/{meta['id']}/traces/{path.name}")
            )
    if not groups:
        return section_html("traces", title, none_html())
    note = (
        f'<p class="note">Open a split and point (or a candidate), then an outcome, then a rollout. Up to '
        f"{SAMPLES_SHOWN} samples per task and {SHOWN_PER_GROUP} rollouts per outcome are written here.</p>"
    )
    return section_html("traces", title, note + "\n" + "\n".join(groups))


def section_accepted(run: RunFiles) -> str:
    """Every accepted candidate against its parent, with the mechanism (hypothesis) it tried."""
    title = "Accepted harnesses against their parents"
    accepted = [m for m in run.candidates if m.get("status") == "accepted"]
    if not accepted:
        return section_html("accepted", title, none_html("none: no challenger was accepted"))
    folder = run.path / SEARCH / "candidates"
    parts = []
    for meta in accepted:
        parent = meta.get("parent") or "c0000"
        mine, theirs = folder / meta["id"] / "harness.py", folder / parent / "harness.py"
        if not (mine.is_file() and theirs.is_file()):
            continue
        old, new = theirs.read_text().splitlines(True), mine.read_text().splitlines(True)
        diff = "".join(difflib.unified_diff(old, new, f"{parent}/harness.py", f"{meta['id']}/harness.py"))
        parts.append(f"<h3>{esc(meta['id'])} (from {esc(parent)}): {esc(meta.get('hypothesis', ''))}</h3>\n"
                     f'<p class="note">{esc(meta.get("reason", ""))}</p>\n{diff_html(diff)}')  # fmt: skip
    return section_html("accepted", title, "\n".join(parts) or none_html())


def section_config(run: RunFiles) -> str:
    return section_html("config", "Config", f"<pre>{esc(yaml.safe_dump(run.config, sort_keys=False))}</pre>")
