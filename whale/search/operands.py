"""`operands:<tool>`: the model names only the operations; the harness does the arithmetic.

Applies when a tool evaluates arithmetic (probed: it returns 5 for "2 + 3") and a text input holds
numbers. The wrapper reads the numbers from the text in order, asks the model which of the four
operations joins each next number to the result so far (the majority of sampled one-word replies), and
has the tool evaluate the expression it builds. A 135M model that cannot add 34 and 40 can often tell
"buys more" from "gives away". Texts with fewer than two numbers, or more than the wrapper's cap, and
replies naming no operation go to the wrapped harness unchanged. No reply holds the computed answer, so the
harness credits the replies that named the chosen operation itself (`llm.credit`; docs/weights.md).
"""

from __future__ import annotations

import re
from typing import Any

from whale.search.wrap import MAX_MODEL_CALLS, Context, rename_run, wrapped_name

NUMBER = r"\d+(?:\.\d+)?"
MAX_OPERANDS = 4

OPERANDS = """

import collections
import re

OPERANDS_TOOL_@K@ = '@TOOL@'  # evaluates the expression the harness builds from the input's numbers
OPERANDS_KEY_@K@ = '@KEY@'  # the text input the numbers are read from
OPERANDS_MAX_@K@ = @MAX@  # at most this many numbers; longer texts go to the wrapped harness
OPERANDS_VOTES_@K@ = 5  # one-word replies sampled per operation; the most common operation is used
OPERANDS_SYSTEM_@K@ = "You read problems and say which operation solves them."
OPERANDS_ASK_@K@ = (
    "Which operation solves this problem: add, subtract, multiply or divide? Answer with one word."
)
OPERANDS_STEP_@K@ = (
    'What does "{part}" do to the amount so far: add, subtract, multiply or divide? Answer with one word.'
)
OPERATION_WORDS_@K@ = {
    "add": "+", "plus": "+", "sum": "+", "addition": "+", "total": "+",
    "subtract": "-", "minus": "-", "subtraction": "-", "difference": "-",
    "multiply": "*", "times": "*", "multiplication": "*", "product": "*",
    "divide": "/", "division": "/", "split": "/", "share": "/",
}  # fmt: skip


def operation_@K@(llm, text, ask):
    \"\"\"The operation most of the sampled replies name, or None when none names one. The replies that
    name it are the ones credited for training (no reply holds the answer the calculator computes).\"\"\"
    messages = [
        {"role": "system", "content": OPERANDS_SYSTEM_@K@},
        {"role": "user", "content": text + "\\n" + ask},
    ]
    replies = llm.chat(messages, max_tokens=6, n=OPERANDS_VOTES_@K@)
    named = []
    for reply in [replies] if isinstance(replies, str) else replies:
        words = [w for w in re.findall(r"[a-z]+", reply.lower()) if w in OPERATION_WORDS_@K@]
        named.append(OPERATION_WORDS_@K@[words[0]] if words else None)
    said = [op for op in named if op is not None]
    best = collections.Counter(said).most_common(1)[0][0] if said else None
    try:
        llm.credit([op is not None and op == best for op in named])
    except AttributeError:
        pass  # a wrapper of llm that does not pass credit on
    return best


def sentence_@K@(text, at):
    \"\"\"The sentence of `text` around position `at`.\"\"\"
    start = max(text.rfind(stop, 0, at) for stop in ".?!") + 1
    ends = [i for i in (text.find(stop, at) for stop in ".?!") if i >= 0]
    return text[start : min(ends) + 1 if ends else len(text)].strip()


def run(task, llm, tools):
    text = str(task.get(OPERANDS_KEY_@K@) or "")
    found = list(re.finditer(r"@NUMBER@", text))
    if not 2 <= len(found) <= OPERANDS_MAX_@K@:
        return @INNER@(task, llm, tools)
    if len(found) == 2:
        ops = [operation_@K@(llm, text, OPERANDS_ASK_@K@)]
    else:
        asks = [OPERANDS_STEP_@K@.format(part=sentence_@K@(text, m.start())) for m in found[1:]]
        ops = [operation_@K@(llm, text, ask) for ask in asks]
    if None in ops:
        return @INNER@(task, llm, tools)
    numbers = [m.group() for m in found]
    expression = numbers[0]
    if ops[0] in "-/" and float(numbers[1]) > float(numbers[0]):
        expression, numbers[1] = numbers[1], numbers[0]  # "8 shared by 24" is 24 / 8
    for op, number in zip(ops, numbers[1:]):
        expression = f"({expression} {op} {number})"
    return str(tools.@TOOL@(expression))
"""


def text_key(inputs: dict[str, Any]) -> str | None:
    """The text input holding the most numbers (at least two)."""
    counts = {k: len(re.findall(NUMBER, v)) for k, v in inputs.items() if isinstance(v, str)}
    best = max(counts, key=counts.get, default=None)
    return best if best is not None and counts[best] >= 2 and best.isidentifier() else None


def operands(source: str, ctx: Context, tool: str) -> str | None:
    spec = next((t for t in ctx.tools if t.name == tool), None)
    key = text_key(ctx.inputs)
    if spec is None or not spec.evaluates or key is None or not tool.isidentifier():
        return None
    inner = wrapped_name(source)
    code = OPERANDS.replace("@K@", inner.removeprefix("run_v")).replace("@INNER@", inner)
    code = code.replace("@TOOL@", tool).replace("@KEY@", key).replace("@NUMBER@", NUMBER)
    code = code.replace("@MAX@", str(min(MAX_OPERANDS, MAX_MODEL_CALLS + 1)))
    return rename_run(source, inner) + code
