"""LLM proposer: asks any OpenAI-compatible chat-completions endpoint for new harness files.

Meta-Harness style, the model reads the archive rather than a summary of it: the code of a few parents
(the incumbent always, plus frontier members drawn with a seeded RNG), their scores under the current
weights, excerpts of their real traces (failing ones first: the model calls' messages and replies, the
tool calls, the answer, the reward, any error), and the recent candidates that failed, were invalid or
duplicated, with their reasons. All of that is cut to fit `context_chars` characters.

Each candidate costs one call; an unusable reply (no python block, a syntax error, a contract violation,
code already in the archive) is re-asked up to `retries` times with the reason added to the conversation.
Endpoint trouble never raises: it is logged and the proposal returns what it has with a note. Every call
is logged to search/sessions/<iteration>-llm-<n>/ (request.json, reply.txt or error.txt, result.json).
Only the standard library is used (urllib), so any server that speaks the OpenAI wire format works.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whale.core.config import ProposerConfig
from whale.core.files import atomic_write_json, atomic_write_text, read_json, read_jsonl
from whale.core.openai_http import EndpointError, api_key_from_env, chat_url, parse_json, post_json
from whale.harness import validate
from whale.harness.records import HarnessCandidate
from whale.search.archive import Archive, code_fingerprint
from whale.search.proposer import Proposal, ProposalRequest, ProposerUsage, budget_spent, session_dir

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

RETRY_MESSAGE = "Your reply could not be used: {reason}. Reply with one complete ```python block."

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
_OPEN_FENCE = re.compile(r"^[ \t]*```[ \t]*(python|py)?[ \t]*$", re.MULTILINE)
_HYPOTHESIS = re.compile(
    r"^[ \t*#_>-]*HYPOTHESIS[ \t*_]*:[ \t*_]*(.+?)[ \t*_]*$", re.MULTILINE | re.IGNORECASE
)
_BASE = re.compile(r"\bBASE[ \t*_]*:[ \t*_`]*(c\d+)", re.IGNORECASE)


@dataclass
class Reply:
    text: str
    finish_reason: str | None
    tokens: int
    usd: float
    seconds: float


@dataclass
class ParsedReply:
    source: str | None
    hypothesis: str
    base: str | None
    reason: str  # why the reply is unusable; "" when source is usable


@dataclass
class _Tally:
    calls: int = 0
    tokens: int = 0
    usd: float = 0.0
    seconds: float = 0.0
    unusable: list[str] = field(default_factory=list)  # reasons of replies that could not be used
    given_up: list[str] = field(default_factory=list)  # last reason of each candidate abandoned


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


def parse_reply(text: str, finish_reason: str | None = None) -> ParsedReply:
    """The harness source, hypothesis and named base of a reply, or why it cannot be used."""
    outside = _FENCE.sub("", text)  # the lines around the code, so a comment in the code is not taken
    hyp = _HYPOTHESIS.search(outside) or _HYPOTHESIS.search(text)
    hypothesis = clip(hyp.group(1).strip(), 500) if hyp else ""
    base = _BASE.search(outside) or _BASE.search(text)
    base_id = base.group(1) if base else None
    blocks = [(m.group(1).lower(), m.start(2), m.group(2)) for m in _FENCE.finditer(text)]
    code = [(start, body) for lang, start, body in blocks if lang in ("python", "py", "python3")]
    code = code or [(start, body) for lang, start, body in blocks if not lang and "def run" in body]
    if not code:
        if _OPEN_FENCE.search(text) and finish_reason == "length":
            why = "the reply was cut off before its code block closed (raise proposer.max_reply_tokens)"
        else:
            why = "no python block"
        return ParsedReply(None, hypothesis, base_id, why)
    # a harness may hold ``` inside a string: also try each block up to the reply's last closing fence
    closes = [m.start() for m in re.finditer(r"^[ \t]*```[ \t]*$", text, re.MULTILINE)]
    options = [body for _, body in code]
    options += [text[start : closes[-1]] for start, _ in code if closes and closes[-1] > start]
    options = [o.strip("\n") + "\n" for o in options]
    options.sort(key=lambda o: (re.search(r"^def run\s*\(", o, re.MULTILINE) is None, -len(o)))
    first_problems: list[str] = []
    for source in options:
        found = validate.problems(source)
        if not found:
            return ParsedReply(source, hypothesis, base_id, "")
        first_problems = first_problems or found
    return ParsedReply(None, hypothesis, base_id, "; ".join(first_problems[:3]))


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
        marker = f"[... {_plural(len(lines) - i, 'more line')} cut]"
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


class LLMProposer:
    """Proposes harness files by asking an OpenAI-compatible chat endpoint (see the module docstring)."""

    name = "llm"

    def __init__(self, cfg: ProposerConfig, usage: ProposerUsage, seed: int = 0):
        self.url = chat_url(cfg.base_url, "proposer.base_url")
        self.api_key = api_key_from_env(cfg.api_key_env, "proposer.api_key_env")
        self.cfg = cfg
        self.usage = usage
        self.seed = seed

    def propose(self, request: ProposalRequest) -> Proposal:
        cfg, tally = self.cfg, _Tally()
        spent = budget_spent(self.usage, cfg.max_sessions, cfg.max_tokens, cfg.max_usd)
        if spent:
            return Proposal([], note=spent, exhausted=True, cost=self._cost(tally))
        rng = random.Random(f"{self.seed}:{request.iteration}")
        shown = select_parents(request.parents, cfg.parents, rng)
        if not shown:
            return Proposal([], note="no parents to improve", cost=self._cost(tally))
        base_messages = build_messages(request, shown, cfg.context_chars, rng)
        known = request.archive.fingerprints()
        out: list[HarnessCandidate] = []
        stop = ""
        for _ in range(request.n):
            messages = list(base_messages)
            if out:
                tried = "\n".join(f"- {clip(c.hypothesis, 150)}" for c in out)
                extra = clip(
                    f"Already proposed this round (propose something different):\n{tried}",
                    already_proposed_chars(cfg.context_chars),
                )
                messages[-1] = {"role": "user", "content": messages[-1]["content"] + "\n\n" + extra}
            hypothesis, reason = "", ""
            for attempt in range(cfg.retries + 1):
                stop = budget_spent(self.usage, cfg.max_sessions, cfg.max_tokens, cfg.max_usd)
                if stop:
                    break
                folder = Path(session_dir(request, "llm"))
                try:
                    reply = self._call(messages, folder, tally)
                except EndpointError as exc:
                    stop = f"endpoint error: {exc}"
                    break
                parsed = parse_reply(reply.text, reply.finish_reason)
                hypothesis = parsed.hypothesis or hypothesis
                reason = parsed.reason
                if parsed.source is not None:
                    fp = code_fingerprint(parsed.source)
                    if fp in known:
                        reason = f"the code is the same as {known[fp]}, already in the archive; change it"
                if not reason:
                    parent = parsed.base if parsed.base in {p.id for p in shown} else shown[0].id
                    cand = HarnessCandidate(
                        request.next_id(),
                        parsed.source or "",
                        parent,
                        hypothesis or "(no hypothesis given)",
                        self.name,
                    )
                    known[code_fingerprint(cand.source)] = cand.id
                    out.append(cand)
                    self._result(folder, reply, "ok", "", cand.id)
                    break
                tally.unusable.append(reason)
                status = "given_up" if attempt == cfg.retries else "unusable"
                self._result(folder, reply, status, reason, None)
                messages = [
                    *messages,
                    {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": RETRY_MESSAGE.format(reason=reason)},
                ]
            else:
                tally.given_up.append(reason)
            if stop:
                break
        spent = budget_spent(self.usage, cfg.max_sessions, cfg.max_tokens, cfg.max_usd)
        note = self._note(out, tally, stop if stop and stop != spent else "")
        if spent:
            note += f"; {spent}"
        return Proposal(out, note=note, exhausted=bool(spent), cost=self._cost(tally))

    def _call(self, messages: list[dict[str, str]], folder: Path, tally: _Tally) -> Reply:
        """One chat-completions request, logged to `folder`; usage is counted even when it fails."""
        cfg = self.cfg
        body = {
            "model": cfg.model,
            "messages": messages,
            "temperature": cfg.temperature,
            "max_tokens": cfg.max_reply_tokens,
        }
        atomic_write_json(folder / "request.json", body)
        start = time.monotonic()
        self.usage.sessions += 1
        tally.calls += 1
        raw = b""
        try:
            raw = post_json(self.url, body, self.api_key, cfg.timeout_s)
            reply = self._decode(raw)
            reply.seconds = time.monotonic() - start
        except EndpointError as exc:
            seconds = time.monotonic() - start
            self._account(tally, 0, 0.0, seconds)
            atomic_write_text(folder / "error.txt", f"{exc}\n")
            if raw:
                atomic_write_text(folder / "reply.txt", raw.decode("utf-8", "replace"))
            atomic_write_json(
                folder / "result.json",
                {
                    "status": "error",
                    "reason": str(exc),
                    "tokens": 0,
                    "usd": 0.0,
                    "seconds": round(seconds, 3),
                },
            )
            raise
        self._account(tally, reply.tokens, reply.usd, reply.seconds)
        atomic_write_text(folder / "reply.txt", reply.text)
        return reply

    def _decode(self, raw: bytes) -> Reply:
        data = parse_json(raw, self.url)
        try:
            choice = data["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise EndpointError(
                f"the answer from {self.url} has no choices[0].message: {str(data)[:300]}"
            ) from exc
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        tokens = usage.get("total_tokens")
        if not isinstance(tokens, int):
            parts = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
            tokens = sum(p for p in parts if isinstance(p, int))
        cost = usage.get("cost")
        usd = float(cost) if isinstance(cost, (int, float)) else 0.0
        return Reply(content or "", choice.get("finish_reason"), tokens, usd, 0.0)

    def _account(self, tally: _Tally, tokens: int, usd: float, seconds: float) -> None:
        self.usage.tokens += tokens
        self.usage.usd += usd
        self.usage.seconds += seconds
        tally.tokens += tokens
        tally.usd += usd
        tally.seconds += seconds

    def _result(self, folder: Path, reply: Reply, status: str, reason: str, cid: str | None) -> None:
        atomic_write_json(
            folder / "result.json",
            {
                "status": status,
                "reason": reason,
                "candidate": cid,
                "finish_reason": reply.finish_reason,
                "tokens": reply.tokens,
                "usd": reply.usd,
                "seconds": round(reply.seconds, 3),
            },
        )

    @staticmethod
    def _cost(tally: _Tally) -> dict[str, Any]:
        return {
            "calls": tally.calls,
            "tokens": tally.tokens,
            "usd": tally.usd,
            "seconds": round(tally.seconds, 3),
        }

    @staticmethod
    def _note(out: list[HarnessCandidate], tally: _Tally, stop: str) -> str:
        parts = [f"{_plural(len(out), 'candidate')} from {_plural(tally.calls, 'call')}"]
        if tally.unusable:
            replies = "reply" if len(tally.unusable) == 1 else "replies"
            parts.append(f"{len(tally.unusable)} unusable {replies}: {clip(tally.unusable[-1], 200)}")
        if tally.given_up:
            given_up = _plural(len(tally.given_up), "candidate")
            parts.append(f"gave up on {given_up} after retries: {clip(tally.given_up[-1], 200)}")
        if stop:
            parts.append(clip(stop, 300))
        return "; ".join(parts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
