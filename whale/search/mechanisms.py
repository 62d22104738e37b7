"""Whole mechanisms as code transformations of a harness file.

Each mechanism wraps what is already there instead of editing it: the file's `run` is renamed
`run_v<k>` and a new `run` calls it. So a mechanism needs to know nothing about the seed's code, works on
any domain, and mechanisms stack (votes over a retried, demonstration-primed harness). What a mechanism
may read is the shape of the task inputs and what the archive holds; never a domain's name.

    votes     self-consistency: run the harness n times, return the most common normalised answer
    retry     run it again when it raised or returned nothing (a parse failure, a tool refusal)
    snap      map the answer onto the closest entry of a list of options in the task's inputs
    demos     worked examples, bootstrapped from rollouts the verifier passed under the current weights
              on search tasks, shown before the conversation of every model call
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from whale.search.diagnosis import options_key

MAX_MODEL_CALLS = 16  # the runner's default cap on model calls per rollout (harness.calls.RunnerLimits)


@dataclass(frozen=True)
class Context:
    """What a mechanism may read: the inputs of one search task, the incumbent's model calls per rollout,
    and demonstrations (user text, passing reply, search task id) from the archive."""

    inputs: dict[str, Any]
    calls_per_rollout: float = 1.0
    demos: list[dict[str, str]] = field(default_factory=list)


def wrapped_name(source: str) -> str:
    taken = {int(m) for m in re.findall(r"\bdef run_v(\d+)\(", source)}
    return f"run_v{max(taken, default=0) + 1}"


def rename_run(source: str, name: str) -> str:
    """The source with its top-level `def run(` renamed (the wrapper added after it calls the old one)."""
    tree = ast.parse(source)
    runs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"]
    if len(runs) != 1:
        raise ValueError("the harness has no single top-level run()")
    lines = source.splitlines(keepends=True)
    line = runs[0].lineno - 1
    lines[line] = lines[line].replace("def run(", f"def {name}(", 1)
    return "".join(lines).rstrip("\n") + "\n"


def votes(source: str, ctx: Context) -> str | None:
    n = int(min(5, MAX_MODEL_CALLS // max(1.0, ctx.calls_per_rollout)))
    if n < 3:
        return None  # each rollout of the harness already makes too many calls to vote
    inner = wrapped_name(source)
    k = inner.removeprefix("run_v")
    return (
        rename_run(source, inner)
        + f"""

N_VOTES_{k} = {n}  # self-consistency: answers sampled, the most common one returned


def run(task, llm, tools):
    answers = [{inner}(task, llm, tools) for _ in range(N_VOTES_{k})]
    counts = {{}}
    for answer in answers:
        key = " ".join(str(answer).lower().split())
        counts[key] = counts.get(key, 0) + 1
    best = max(counts, key=counts.get)
    return next(answer for answer in answers if " ".join(str(answer).lower().split()) == best)
"""
    )


def retry(source: str, ctx: Context) -> str | None:
    inner = wrapped_name(source)
    k = inner.removeprefix("run_v")
    return (
        rename_run(source, inner)
        + f"""

RETRIES_{k} = 1  # another try when the harness raised or returned nothing


def run(task, llm, tools):
    answer = ""
    for _ in range(RETRIES_{k} + 1):
        try:
            answer = {inner}(task, llm, tools)
        except Exception:
            answer = ""
        if str(answer).strip():
            return answer
    return answer
"""
    )


def snap(source: str, ctx: Context) -> str | None:
    key = options_key(ctx.inputs)
    if key is None:
        return None
    inner = wrapped_name(source)
    k = inner.removeprefix("run_v")
    return (
        rename_run(source, inner)
        + f"""

import re

OPTIONS_KEY_{k} = {key!r}  # the task input that lists the allowed answers


def run(task, llm, tools):
    answer = str({inner}(task, llm, tools))
    options = task.get(OPTIONS_KEY_{k}) or []
    if not options or answer in options:
        return answer
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    letter = re.fullmatch(r"\\W*([A-Za-z])\\W*", answer)
    if letter and letters.find(letter.group(1).upper()) < len(options):
        return options[letters.find(letter.group(1).upper())]
    words = set(re.findall(r"\\w+", answer.lower()))

    def overlap(option):
        theirs = set(re.findall(r"\\w+", option.lower()))
        return len(words & theirs) / max(1, len(theirs))

    return max(options, key=overlap)
"""
    )


def demos(source: str, ctx: Context) -> str | None:
    if not ctx.demos:
        return None
    inner = wrapped_name(source)
    k = inner.removeprefix("run_v")
    shown = json.dumps(ctx.demos, indent=4, ensure_ascii=False)
    return (
        rename_run(source, inner)
        + f'''

import collections

# worked examples: passing rollouts of search tasks under the weights they were proposed for
DEMOS_{k} = {shown}


def primed_{k}(llm):
    """The model, with the worked examples before each conversation (a task's own example skipped)."""

    def chat(messages, **options):
        texts = [m["content"] for m in messages]
        shown = []
        for demo in DEMOS_{k}:
            if demo["user"] not in texts:
                shown.append({{"role": "user", "content": demo["user"]}})
                shown.append({{"role": "assistant", "content": demo["reply"]}})
        head = [m for m in messages if m["role"] == "system"]
        rest = [m for m in messages if m["role"] != "system"]
        return llm.chat(head + shown + rest, **options)

    return collections.namedtuple("PrimedLLM", ["chat"])(chat)


def run(task, llm, tools):
    return {inner}(task, primed_{k}(llm), tools)
'''
    )


MECHANISMS = {"votes": votes, "retry": retry, "snap": snap, "demos": demos}
