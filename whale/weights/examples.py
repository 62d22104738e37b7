"""Rollouts as training sequences: every credited model call as (prompt + completion ids, mask on the
completion), and the grouping (one task's rollouts under one harness) the algorithms compare within.

A rollout's calls are not all what produced its answer, so RFT, DPO and GRPO train only on the credited
ones. A harness may say which they are (`llm.credit`, recorded as ModelCall.credit), and what it says
wins; the rest is decided from the trace alone:

  samples of one request   consecutive calls with the same conversation (the n samples of one
                           `llm.chat(..., n=...)`, or a harness run several times to vote): only the
                           samples that agree with the returned answer (its words appear in the
                           reply); none when no sample says it (crediting the most common reply
                           instead trained degenerate votes: docs/weights.md)
  failed attempts          a call whose conversation a later call continues with its reply and a new
                           user turn, with no tool call between them that succeeded: a retry, which
                           re-asks because the reply could not be used (an agent step that ran a tool
                           on the reply is kept); with it, the other samples of its request
  train=False              calls the harness opted out of training

Everything else is credited. What the trace cannot show: a vote over harness runs of several calls each
(their calls are not consecutive), whose losing runs stay in unless the harness says otherwise (the
`votes` mechanism does).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from whale.harness.records import ModelCall, Rollout
from whale.model.trainer import TrainExample


def trainable(rollout: Rollout) -> list[ModelCall]:
    """The credited calls of a rollout (see the module docstring)."""
    credit = [c.train and bool(c.completion_ids) for c in rollout.calls]
    failed = set(failed_attempts(rollout))
    for i in failed:
        credit[i] = False
    for group in sample_groups(rollout.calls):
        winners = (
            set() if failed & set(group) else agreeing([rollout.calls[i].text for i in group], rollout.answer)
        )
        for k, i in enumerate(group):
            credit[i] = credit[i] and k in winners
    for i, call in enumerate(rollout.calls):
        if call.credit is not None:
            credit[i] = call.credit and bool(call.completion_ids)
    return [c for c, keep in zip(rollout.calls, credit, strict=True) if keep]


def words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def same_turns(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    return [(m.get("role"), m.get("content")) for m in a] == [(m.get("role"), m.get("content")) for m in b]


def sample_groups(calls: list[ModelCall]) -> list[list[int]]:
    """Runs of at least two consecutive calls on the same conversation, as index lists."""
    groups, run = [], [0] if calls else []
    for i in range(1, len(calls)):
        if same_turns(calls[i].messages, calls[run[0]].messages):
            run.append(i)
        else:
            groups.append(run)
            run = [i]
    groups.append(run)
    return [g for g in groups if len(g) > 1]


def agreeing(texts: list[str], answer: str | None) -> set[int]:
    """The samples whose reply contains the answer's words."""
    said = words(answer or "")
    if not said:
        return set()
    return {k for k, t in enumerate(texts) if re.search(rf"(?<!\w){re.escape(said)}(?!\w)", words(t))}


def failed_attempts(rollout: Rollout) -> list[int]:
    """Calls a later call re-asks: it continues their conversation after their reply, and no tool call
    between the two succeeded (a tool call of unknown position counts as a success)."""
    calls, failed = rollout.calls, []
    for i, a in enumerate(calls):
        turn = {"role": "assistant", "content": a.text}
        for j in range(i + 1, len(calls)):
            b = calls[j].messages
            if len(b) > len(a.messages) + 1 and same_turns(b[: len(a.messages) + 1], [*a.messages, turn]):
                between = [t for t in rollout.tool_calls if t.after_calls is None or i < t.after_calls <= j]
                if all(t.error is not None and t.after_calls is not None for t in between):
                    failed.append(i)
                break
    return failed


def call_example(call: ModelCall, **fields: Any) -> TrainExample:
    """A model call as (prompt + completion ids, mask on the completion), with the loss's extra fields."""
    ids = call.prompt_ids + call.completion_ids
    return TrainExample(ids, [0] * len(call.prompt_ids) + [1] * len(call.completion_ids), **fields)


def call_examples(rollout: Rollout, **fields: Any) -> list[TrainExample]:
    """Every train=True model call of a rollout as a training sequence."""
    return [call_example(c, **fields) for c in trainable(rollout)]


def passed(rollout: Rollout, threshold: float) -> bool:
    return rollout.error is None and rollout.reward >= threshold


def groups_of(rollouts: list[Rollout]) -> dict[tuple[str, str], list[Rollout]]:
    """Rollouts by (task, harness), in sample order: the rollouts whose rewards are comparable."""
    groups: dict[tuple[str, str], list[Rollout]] = defaultdict(list)
    for r in rollouts:
        groups[(r.task_id, r.harness_id)].append(r)
    return groups


def drop_uniform(rollouts: list[Rollout], threshold: float) -> tuple[list[Rollout], int]:
    """The rollouts of groups with both passing and failing members, and how many groups were dropped."""
    keep, dropped = [], 0
    for group in groups_of(rollouts).values():
        if len({passed(r, threshold) for r in group}) == 2:
            keep += group
        else:
            dropped += 1
    return keep, dropped
