"""The LLM proposer's prompt: the brief, parents with their scores, failing and passing trace excerpts and
recent failures, fitted into a character budget section by section."""

from __future__ import annotations

import random
from typing import Any

from whale.core.files import read_json, read_jsonl
from whale.harness.records import HarnessCandidate
from whale.search.archive import Archive
from whale.search.diagnosis import describe
from whale.search.proposer import ProposalRequest

FAILED_STATUSES = ("failed", "invalid", "duplicate", "rejected")


RECENT_FAILURES = 8  # failed/invalid/duplicate/rejected candidates listed, newest first


FAILING_TRACES = 3  # per parent, worst first


PASSING_TRACES = 1  # per parent


MESSAGE_CHARS = 600  # one message, reply, tool result or log line inside a trace excerpt


ALREADY_PROPOSED_CHARS = 600  # at most, for the list of this round's earlier hypotheses in later calls


MIN_SECTION_CHARS = 200  # a section that cannot get this much room is left out rather than cut to nothing


SYSTEM_PREAMBLE = """\
You improve the harness of an LLM agent: a Python file `run(task, llm, tools)` that wraps the model being
trained (prompts, parsing, tool use, retries, voting, verification). The harness is scored by the mean
reward over held-out tasks of the domain below, with the current model weights. You are shown parent
harnesses with their scores and excerpts of their real traces; propose one new harness that should score
higher (or as high with fewer model tokens). Prefer changing a mechanism over rewording a prompt."""


REPLY_FORMAT = """\
Reply in exactly this format:
BASE: <id of the parent you started from>
HYPOTHESIS: <one line: what you changed and why it should raise the score>
```python
<the complete new harness file>
```
Exactly one ```python block holding the whole file, no diff and no placeholders."""


def clip(text: str, limit: int) -> str:
    """At most `limit` characters: head and tail kept with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} chars cut ...]\n"
    if limit <= len(marker) + 20:
        return text[: max(limit, 0)]
    room = limit - len(marker)
    head = room * 2 // 3
    return text[:head] + marker + text[len(text) - (room - head) :]


class _Budget:
    """Characters left for the prompt; sections are cut to fit or left out."""

    def __init__(self, chars: int):
        self.left = chars

    def take(self, text: str, cap: int | None = None) -> str | None:
        room = self.left if cap is None else min(self.left, cap)
        if len(text) > room and room < MIN_SECTION_CHARS:
            return None
        out = clip(text, room)
        self.left -= len(out) + 2  # sections are joined by a blank line
        return out


def already_proposed_chars(context_chars: int) -> int:
    """Room kept free in the prompt for the list of hypotheses already proposed this round."""
    return min(ALREADY_PROPOSED_CHARS, context_chars // 10)


def select_parents(parents: list[HarnessCandidate], k: int, rng: random.Random) -> list[HarnessCandidate]:
    """The incumbent (parents[0]) and up to k-1 frontier members drawn at random."""
    if not parents:
        return []
    others = [p for p in parents[1:] if p.id != parents[0].id]
    return [parents[0], *rng.sample(others, min(max(k - 1, 0), len(others)))]


def score_summary(archive: Archive, cid: str, weights_version: str) -> str:
    """The candidate's evaluation under these weights, in a few lines."""
    path = archive.candidates_dir / cid / "evals" / f"{weights_version}.json"
    if not path.exists():
        return f"not evaluated under weights {weights_version}"
    ev = read_json(path)
    per_task: dict[str, float] = ev.get("per_task", {})
    scores = sorted(per_task.items(), key=lambda kv: (kv[1], kv[0]))
    full = sum(1 for _, s in scores if s >= 1.0)
    zero = sum(1 for _, s in scores if s <= 0.0)
    lines = [
        f"mean reward {ev.get('mean', 0.0):.3f} over {len(scores)} tasks ({full} solved, {zero} scored 0); "
        f"{ev.get('tokens_per_rollout', 0.0):.0f} generated tokens and "
        f"{ev.get('calls_per_rollout', 0.0):.1f} model calls per rollout; "
        f"{ev.get('errors', 0)} crashed rollouts",
    ]
    if ev.get("rollouts"):
        lines.append(describe(ev.get("failures", {}), ev["rollouts"]))
    worst = [f"{t}={s:.2f}" for t, s in scores[:8] if s < 1.0]
    if worst:
        lines.append("lowest tasks: " + ", ".join(worst))
    return "\n".join(lines)


def render_trace(trace: dict[str, Any], message_chars: int = MESSAGE_CHARS) -> str:
    """One rollout as readable text: the outcome, tool calls, each model call's messages and reply."""
    head = f"task {trace.get('task_id')} (sample {trace.get('sample', 0)}): reward {trace.get('reward', 0.0)}"
    lines = [head]
    if trace.get("error"):
        lines.append(f"ERROR: {clip(str(trace['error']), message_chars)}")
    lines.append(f"answer: {clip(repr(trace.get('answer')), message_chars)}")
    for t in trace.get("tool_calls", []):
        args = ", ".join(
            [repr(a) for a in t.get("args", [])] + [f"{k}={v!r}" for k, v in t.get("kwargs", {}).items()]
        )
        outcome = f"error: {t['error']}" if t.get("error") else repr(t.get("result"))
        lines.append(f"tool {t.get('name')}({clip(args, message_chars)}) -> {clip(outcome, message_chars)}")
    for i, call in enumerate(trace.get("calls", []), 1):
        params = call.get("params") or {}
        knobs = ", ".join(f"{k}={v}" for k, v in params.items() if v is not None)
        lines.append(
            f"model call {i} (finish={call.get('finish_reason')}, "
            f"{len(call.get('completion_ids') or [])} tokens{', ' + knobs if knobs else ''}):"
        )
        for m in call.get("messages", []):
            lines.append(f"  [{m.get('role')}] {clip(str(m.get('content')), message_chars)}")
        lines.append(f"  -> reply: {clip(str(call.get('text')), message_chars)}")
    for log in trace.get("logs", [])[-5:]:
        lines.append(f"log: {clip(str(log), message_chars)}")
    return "\n".join(lines)


def clip_lines(text: str, limit: int) -> str:
    """The first lines of text that fit in `limit` characters, with a note of how many were cut."""
    if len(text) <= limit:
        return text
    lines = text.split("\n")
    kept: list[str] = []
    size = 0
    for i, line in enumerate(lines):
        marker = f"[... {plural(len(lines) - i, 'more line')} cut]"
        if size + len(line) + 1 + len(marker) > limit:
            if not kept:  # not even the first line fits whole
                return clip(text, limit)
            return "\n".join([*kept, marker])
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept)


def pick_traces(
    traces: list[dict[str, Any]], rng: random.Random
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(failing, passing) rollouts to show: the worst first, one per task where possible."""
    if not traces:
        return [], []
    best = max(float(t.get("reward", 0.0)) for t in traces)
    shuffled = list(traces)
    rng.shuffle(shuffled)
    failing = [t for t in shuffled if t.get("error") or float(t.get("reward", 0.0)) < best or best <= 0.0]
    failing_ids = {id(t) for t in failing}
    passing = [t for t in shuffled if id(t) not in failing_ids]
    failing.sort(key=lambda t: (float(t.get("reward", 0.0)), not t.get("error")))

    def distinct(items: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
        out, tasks = [], set()
        for t in items:
            if t.get("task_id") not in tasks:
                tasks.add(t.get("task_id"))
                out.append(t)
            if len(out) == k:
                break
        return out

    return distinct(failing, FAILING_TRACES), distinct(passing, PASSING_TRACES)


def recent_failures(archive: Archive, limit: int = RECENT_FAILURES) -> list[str]:
    """The newest candidates that did not work out, with the archive's reason."""
    out = []
    for cid in reversed(archive.ids()):
        try:
            meta = archive.meta(cid)
        except (OSError, ValueError):
            continue
        if meta.get("status") in FAILED_STATUSES:
            hyp = clip(str(meta.get("hypothesis") or ""), 160)
            reason = clip(str(meta.get("reason") or ""), 300)
            out.append(f"- {cid} ({meta['status']}; tried: {hyp or '?'}): {reason}")
        if len(out) == limit:
            break
    return out


def build_messages(
    request: ProposalRequest, shown: list[HarnessCandidate], context_chars: int, rng: random.Random
) -> list[dict[str, str]]:
    """System (role, brief) and user (archive context, reply format) messages within context_chars."""
    reserved = already_proposed_chars(context_chars) + 4  # the list and its separator, added later
    budget = _Budget(context_chars - len(SYSTEM_PREAMBLE) - len(REPLY_FORMAT) - 2 - reserved)
    brief = budget.take(request.brief.strip(), cap=max(budget.left // 2, MIN_SECTION_CHARS)) or ""
    system = f"{SYSTEM_PREAMBLE}\n\n{brief}"
    archive, wv = request.archive, request.weights_version
    sections: list[str] = []

    def add(text: str, cap: int | None = None) -> bool:
        piece = budget.take(text, cap)
        if piece is not None:
            sections.append(piece)
        return piece is not None

    ids = ", ".join(p.id for p in shown)
    add(f"# Parents ({ids}); {shown[0].id} is the incumbent, the best harness so far")
    for i, p in enumerate(shown):
        role = "incumbent" if i == 0 else "frontier member"
        hyp = f"\nits hypothesis: {clip(p.hypothesis, 300)}" if p.hypothesis else ""
        origin = f"parent {p.parent}" if p.parent else "no parent"
        add(f"## {p.id} ({role}; {origin}){hyp}\nscore: {score_summary(archive, p.id, wv)}")
        add(f"```python\n{p.source.rstrip()}\n```")
    failures = recent_failures(archive)
    if failures:
        add("# Recent candidates that did not work out (do not repeat them)\n" + "\n".join(failures),
            cap=max(budget.left // 5, MIN_SECTION_CHARS))  # fmt: skip
    picked = []
    for p in shown:
        path = archive.candidates_dir / p.id / "traces" / f"{wv}.jsonl"
        traces = read_jsonl(path) if path.exists() else []
        picked.append((p, *pick_traces(traces, rng)))
    per_trace = max(MIN_SECTION_CHARS, context_chars // 8)
    message_chars = min(MESSAGE_CHARS, max(per_trace // 4, 80))
    header = False
    for kind, index in (("failing", 1), ("passing", 2)):
        for entry in picked:
            for trace in entry[index]:
                if not header:
                    header = add(f"# Trace excerpts under weights {wv}")
                text = f"## {kind} trace of {entry[0].id}: {render_trace(trace, message_chars)}"
                room = min(per_trace, budget.left)
                if room < MIN_SECTION_CHARS or not add(clip_lines(text, room)):
                    break
    system_msg = {"role": "system", "content": system}
    user_msg = {"role": "user", "content": "\n\n".join([*sections, REPLY_FORMAT])}
    return [system_msg, user_msg]


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
