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
from whale.core.files import atomic_write_json, atomic_write_text
from whale.core.openai_http import EndpointError, api_key_from_env, chat_url, parse_json, post_json
from whale.harness import validate
from whale.harness.records import HarnessCandidate
from whale.search.archive import code_fingerprint
from whale.search.llm_prompt import already_proposed_chars, build_messages, clip, plural, select_parents
from whale.search.proposer import Proposal, ProposalRequest, ProposerUsage, budget_spent, session_dir

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
            raw = post_json(self.url, body, self.api_key, cfg.timeout_s, cfg.http_retries, cfg.backoff_s)
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
        parts = [f"{plural(len(out), 'candidate')} from {plural(tally.calls, 'call')}"]
        if tally.unusable:
            replies = "reply" if len(tally.unusable) == 1 else "replies"
            parts.append(f"{len(tally.unusable)} unusable {replies}: {clip(tally.unusable[-1], 200)}")
        if tally.given_up:
            given_up = plural(len(tally.given_up), "candidate")
            parts.append(f"gave up on {given_up} after retries: {clip(tally.given_up[-1], 200)}")
        if stop:
            parts.append(clip(stop, 300))
        return "; ".join(parts)
