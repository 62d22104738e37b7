"""The proposer seam: what every harness proposer (mutation, LLM, coding agent) receives and returns.

A proposer gets the archive (read it, never write it), the parents the search wants improved (the
incumbent first, then frontier members), how many candidates to return, and the brief it must follow. It
returns complete harness files; validation, smoke tests and scoring happen after it, in the sandbox.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from whale.harness.records import HarnessCandidate
from whale.search.archive import Archive

HARNESS_CONTRACT = """\
# Harness contract

A harness is one Python file defining `run(task, llm, tools) -> str`.

- `task` is a dict of the task's inputs (never its answer).
- `llm.chat(messages, max_tokens=None, temperature=None, stop=None, n=1, train=True)` sends a chat
  (a list of {"role", "content"} dicts) to the model being trained and returns the reply string (a list
  of strings when n > 1). Every call is recorded; train=False keeps a call out of the training data.
- `llm.credit(keep, calls=None)` says which model calls produced the answer, so that only they are
  trained on: one bool per sample of the last llm.chat (or one bool for all), or one bool for the call
  indices in `calls` (`llm.calls_made()` counts the calls so far). Use it when the answer is computed
  from replies that do not contain it (votes on an operation, a choice made by code).
- `tools.<name>(...)` calls one of the domain's tools (see the brief); a refused call raises an
  exception whose message says why.
- Allowed imports: re, math, json, collections, itertools, functools, statistics, random, string.
  No open/exec/eval/compile/getattr/__import__, no names or attributes starting with "_", no frame or
  generator introspection. There are no files and no network inside the sandbox.
- Module-level UPPER_CASE constants holding a literal are knobs other proposers may tune.
- The harness runs under time and memory limits; a crash or a timeout scores 0 for that task.
- Never hard-code answers or recognise specific tasks: the harness is scored on tasks it has not seen.
"""


@dataclass
class ProposalRequest:
    archive: Archive
    parents: list[HarnessCandidate]  # parents[0] is the incumbent; the rest are frontier members
    n: int  # at most this many candidates
    next_id: Callable[[], str]  # names a new candidate (its archive folder)
    weights_version: str  # the weights the parents' scores and traces belong to
    brief: str  # the domain's brief followed by HARNESS_CONTRACT
    iteration: int
    seen: set[tuple] = field(default_factory=set)  # knob signatures already in the archive
    failures: dict[str, int] | None = None  # failures to address, when the caller diagnosed them (rescue)


@dataclass
class Proposal:
    candidates: list[HarnessCandidate]
    note: str = ""  # what happened, for the event log ("2 files", "timed out after 600 s", ...)
    exhausted: bool = False  # the proposer's own budget is spent: it will not propose again
    cost: dict[str, Any] = field(default_factory=dict)  # seconds, tokens, usd when known


class Proposer(Protocol):
    name: str

    def propose(self, request: ProposalRequest) -> Proposal: ...


def full_brief(domain_brief: str) -> str:
    return f"# Domain\n\n{domain_brief.strip()}\n\n{HARNESS_CONTRACT}"


@dataclass
class ProposerUsage:
    """What a proposer has spent so far; kept in the run's state.json so budgets survive a resume."""

    sessions: int = 0  # LLM calls or agent sessions
    tokens: int = 0  # as reported by the endpoint or tool; 0 when unknown
    usd: float = 0.0  # as reported; 0 when unknown
    seconds: float = 0.0


def budget_spent(
    usage: ProposerUsage, max_sessions: int, max_tokens: int | None, max_usd: float | None
) -> str:
    """Why the proposer may not run again, or "" when it may."""
    if usage.sessions >= max_sessions:
        return f"proposer budget spent: {usage.sessions} of {max_sessions} sessions used"
    if max_tokens is not None and usage.tokens >= max_tokens:
        return f"proposer budget spent: {usage.tokens} of {max_tokens} tokens used"
    if max_usd is not None and usage.usd >= max_usd:
        return f"proposer budget spent: ${usage.usd:.2f} of ${max_usd:.2f} used"
    return ""


def session_dir(request: ProposalRequest, kind: str) -> Any:
    """A fresh folder for one proposer session's logs: search/sessions/<iteration>-<kind>-<n>/."""
    root = request.archive.root / "sessions"
    root.mkdir(parents=True, exist_ok=True)
    n = sum(1 for p in root.iterdir() if p.name.startswith(f"{request.iteration:04d}-{kind}-"))
    folder = root / f"{request.iteration:04d}-{kind}-{n}"
    folder.mkdir()
    return folder
