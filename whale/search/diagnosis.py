"""Why a candidate's rollouts failed, counted by kind, from its traces alone (no domain knowledge).

A failed rollout gets the first kind that fits, in this order:

    crash               the harness raised, broke the sandbox rules or the protocol
    timeout             it ran past a step or rollout time limit
    tool error          a tool refused at least one of its calls
    empty reply         every model call came back empty
    no answer           run() returned nothing (None or blank)
    outside candidates  the task's inputs list the allowed answers, and the answer is none of them
    wrong value         an answer was given and scored below full reward

The counts are stored with every candidate's evaluation in the archive (`CandidateEval.failures`), shown
by `whale archive show`, and read by the LLM and agent proposers: the evidence a proposer needs to pick
what to change (a retry for parse failures, snapping to the candidate set, a tool fallback).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from whale.core.stats import SUCCESS
from whale.harness.records import Rollout

KINDS = (
    "crash", "timeout", "tool error", "empty reply", "no answer", "outside candidates", "wrong value",
)  # fmt: skip
MAX_OPTIONS = 64  # a longer list of strings in the inputs is data, not a set of allowed answers


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower()).strip(" .")


def options_key(inputs: dict[str, Any] | None) -> str | None:
    """The input that lists the allowed answers: the first list of 2 to MAX_OPTIONS strings."""
    for key, value in (inputs or {}).items():
        if (
            isinstance(value, list)
            and 2 <= len(value) <= MAX_OPTIONS
            and all(isinstance(v, str) for v in value)
        ):
            return key
    return None


def candidate_set(inputs: dict[str, Any] | None) -> set[str] | None:
    """The allowed answers a task's inputs spell out, normalised (None when they list none)."""
    key = options_key(inputs)
    return None if key is None else {normalise(v) for v in inputs[key]}


def failure_kind(rollout: Rollout, inputs: dict[str, Any] | None = None) -> str | None:
    """The kind of failure of one rollout, None when it passed."""
    if rollout.error is None and rollout.reward >= SUCCESS:
        return None
    if rollout.error is not None:
        return "timeout" if rollout.error.startswith("timeout") else "crash"
    if any(call.error for call in rollout.tool_calls):
        return "tool error"
    if rollout.calls and not any(call.text.strip() for call in rollout.calls):
        return "empty reply"
    answer = (rollout.answer or "").strip()
    if not answer:
        return "no answer"
    options = candidate_set(inputs)
    if options is not None and normalise(answer) not in options:
        return "outside candidates"
    return "wrong value"


def diagnose(rollouts: list[Rollout], inputs: dict[str, dict[str, Any]] | None = None) -> dict[str, int]:
    """Failures by kind over `rollouts` (task id -> inputs gives the candidate sets), most frequent first."""
    counts = Counter(failure_kind(r, (inputs or {}).get(r.task_id)) for r in rollouts)
    counts.pop(None, None)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], KINDS.index(kv[0]))))


def describe(failures: dict[str, int], rollouts: int) -> str:
    """One line: 'failures over 32 rollouts: no answer 12, wrong value 9' (or 'none')."""
    if not failures:
        return f"failures over {rollouts} rollouts: none"
    return f"failures over {rollouts} rollouts: " + ", ".join(f"{k} {n}" for k, n in failures.items())
