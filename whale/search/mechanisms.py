"""Whole mechanisms as code transformations of a harness file.

Each mechanism wraps what is already there instead of editing it (whale/search/wrap.py): the file's
`run` is renamed `run_v<k>` and a new `run` calls it. So a mechanism needs to know nothing about the
seed's code, works on any domain, and mechanisms stack (votes over a retried, demonstration-primed
harness). What a mechanism may read is the shape of the task inputs and what the archive holds; never a
domain's name.

    votes          self-consistency: run the harness n times, return the most common normalised answer
    retry          when it raised or returned nothing (a parse failure, a tool refusal), run it again with
                   the error fed back: its last reply and what went wrong end the next conversation
    snap           map the answer onto the closest entry of a list of options in the task's inputs
    snap:<tool>    map every model reply that names none of the options a tool lists (it takes no
                   arguments) onto the closest one, by spelling alone
    demos          worked examples, bootstrapped from rollouts the verifier passed under the current
                   weights on search tasks, shown before the conversation of every model call
    plan           decompose: the first model call becomes two, a short plan and then the answer with the
                   plan in front of it
    delegate:<tool>  tool delegation: before the first model call, ask the model for the tool's argument
                   (or call a tool without arguments directly), make the call in the harness and put the
                   result into the conversation (program-of-thought when the tool is a calculator)
    operands:<tool>  when the tool computes and a text input holds numbers, the model names only the
                   operations and the tool evaluates the expression built from the numbers
                   (whale/search/operands.py)
"""

from __future__ import annotations

import json
import re

from whale.search.diagnosis import options_key
from whale.search.operands import operands
from whale.search.wrap import MAX_MODEL_CALLS, Context, rename_run, wrapped_name


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


def calls_made_{k}(llm):
    try:
        return llm.calls_made()
    except AttributeError:
        return 0  # a wrapper of llm that does not pass it on: no credit is given


def run(task, llm, tools):
    answers, spans = [], []
    for _ in range(N_VOTES_{k}):
        start = calls_made_{k}(llm)
        answers.append({inner}(task, llm, tools))
        spans.append(range(start, calls_made_{k}(llm)))
    counts = {{}}
    for answer in answers:
        key = " ".join(str(answer).lower().split())
        counts[key] = counts.get(key, 0) + 1
    best = max(counts, key=counts.get)
    for answer, span in zip(answers, spans):
        if " ".join(str(answer).lower().split()) != best and len(span):
            llm.credit(False, calls=span)  # a losing run's calls did not produce the answer
    return next(answer for answer in answers if " ".join(str(answer).lower().split()) == best)
"""
    )


def retry(source: str, ctx: Context) -> str | None:
    inner = wrapped_name(source)
    k = inner.removeprefix("run_v")
    return (
        rename_run(source, inner)
        + f"""

import collections

RETRIES_{k} = 1  # another try, told what went wrong, when the harness raised or returned nothing
RETRY_NOTE_{k} = "Your reply could not be used: {{problem}}. Reply again, in the format asked for."


def attempt_{k}(task, llm, tools, told):
    \"\"\"One try; its first model call ends with `told` (the last reply, what went wrong), if any.\"\"\"
    state = {{"reply": "", "told": told}}

    def chat(messages, **options):
        if state["told"]:
            messages = list(messages) + [
                {{"role": "assistant", "content": state["told"][0]}},
                {{"role": "user", "content": state["told"][1]}},
            ]
            state["told"] = None
        reply = llm.chat(messages, **options)
        state["reply"] = reply if isinstance(reply, str) else (reply[0] if reply else "")
        return reply

    try:
        answer = {inner}(task, collections.namedtuple("ToldLLM", ["chat"])(chat), tools)
        problem = "" if str(answer).strip() else "no answer was found in it"
    except Exception as error:
        answer, problem = "", str(error)[:300] or "the harness failed"
    return answer, problem, state["reply"]


def run(task, llm, tools):
    told, answer = None, ""
    for _ in range(RETRIES_{k} + 1):
        answer, problem, reply = attempt_{k}(task, llm, tools, told)
        if not problem:
            return answer
        told = (reply, RETRY_NOTE_{k}.format(problem=problem))
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

    return collections.namedtuple("PrimedLLM", ["chat", "credit", "calls_made"])(
        chat, lambda *a, **kw: llm.credit(*a, **kw), lambda: llm.calls_made()
    )


def run(task, llm, tools):
    return {inner}(task, primed_{k}(llm), tools)
'''
    )


def snap_tool(source: str, ctx: Context, tool: str) -> str | None:
    inner = wrapped_name(source)
    k = inner.removeprefix("run_v")
    return (
        rename_run(source, inner)
        + f"""

import collections
import re

OPTIONS_TOOL_{k} = {tool!r}  # a tool without arguments that lists the allowed answers


def closest_{k}(reply, lists):
    \"\"\"The reply when it names an option; else the option spelled most like it (character pairs).\"\"\"
    options = [o for entries in lists for o in entries]
    words = set(re.findall(r"[\\w+#=-]+", reply))
    if not options or words & set(options):
        return reply

    def pairs(text):
        text = text.lower()
        return {{text[i : i + 2] for i in range(len(text) - 1)}} or {{text}}

    said = pairs(reply)
    return max(options, key=lambda o: len(said & pairs(o)) / len(pairs(o)))


def snapped_{k}(llm, tools):
    def chat(messages, **options):
        found = tools.{tool}()
        values = list(found.values()) if isinstance(found, dict) else [found]
        lists = [v for v in values if isinstance(v, list) and v and all(isinstance(x, str) for x in v)]
        replies = llm.chat(messages, **options)
        if isinstance(replies, str):
            return closest_{k}(replies, lists)
        return [closest_{k}(r, lists) for r in replies]

    return collections.namedtuple("SnappedLLM", ["chat", "credit", "calls_made"])(
        chat, lambda *a, **kw: llm.credit(*a, **kw), lambda: llm.calls_made()
    )


def run(task, llm, tools):
    return {inner}(task, snapped_{k}(llm, tools), tools)
"""
    )


def plan(source: str, ctx: Context) -> str | None:
    if ctx.calls_per_rollout + 1 > MAX_MODEL_CALLS:
        return None
    inner = wrapped_name(source)
    k = inner.removeprefix("run_v")
    return (
        rename_run(source, inner)
        + f"""

import collections

PLAN_PROMPT_{k} = "First write, briefly, the steps needed to solve this. Do not give the final answer yet."
PLAN_TOKENS_{k} = 64


def planned_{k}(llm):
    \"\"\"The model; its first conversation is preceded by a call that writes a plan, shown after it.\"\"\"
    state = {{"planned": False}}

    def chat(messages, **options):
        if state["planned"] or not messages or messages[-1]["role"] != "user":
            return llm.chat(messages, **options)
        state["planned"] = True
        head, last = list(messages[:-1]), messages[-1]["content"]
        ask = head + [{{"role": "user", "content": last + "\\n\\n" + PLAN_PROMPT_{k}}}]
        steps = llm.chat(ask, max_tokens=PLAN_TOKENS_{k})
        steps = steps if isinstance(steps, str) else (steps[0] if steps else "")
        return llm.chat(head + [{{"role": "user", "content": last + "\\n\\nPlan: " + steps}}], **options)

    return collections.namedtuple("PlannedLLM", ["chat", "credit", "calls_made"])(
        chat, lambda *a, **kw: llm.credit(*a, **kw), lambda: llm.calls_made()
    )


def run(task, llm, tools):
    return {inner}(task, planned_{k}(llm), tools)
"""
    )


ASK_FOR_ARGUMENT = """
    reply = llm.chat(head + [{"role": "user", "content": last + "\\n\\n" + DELEGATE_ASK_@K@}], max_tokens=64)
    reply = reply if isinstance(reply, str) else (reply[0] if reply else "")
    found = re.search(r"@PARAM@\\s*:\\s*(.+)", reply, re.IGNORECASE)
    lines = (found.group(1) if found else reply).strip().splitlines()
    value = lines[0].strip(" `") if lines else ""
    try:
        return "The tool @TOOL@(" + repr(value) + ") returned: " + str(tools.@TOOL@(value))[:800]
    except Exception as error:
        return "The tool @TOOL@(" + repr(value) + ") failed: " + str(error)[:300]
"""
CALL_DIRECTLY = """
    try:
        return "The tool @TOOL@() returned: " + str(tools.@TOOL@())[:800]
    except Exception as error:
        return "The tool @TOOL@() failed: " + str(error)[:300]
"""
DELEGATED = """

import collections
import re

DELEGATE_TOOL_@K@ = '@TOOL@'  # the harness makes this tool call and shows the model its result
DELEGATE_ASK_@K@ = @ASK@


def tool_result_@K@(llm, tools, head, last):
    \"\"\"The line shown to the model: the tool's result for the argument the model gave.\"\"\"@BODY@

def delegated_@K@(llm, tools):
    state = {"done": False}

    def chat(messages, **options):
        if state["done"] or not messages or messages[-1]["role"] != "user":
            return llm.chat(messages, **options)
        state["done"] = True
        head, last = list(messages[:-1]), messages[-1]["content"]
        shown = tool_result_@K@(llm, tools, head, last)
        return llm.chat(head + [{"role": "user", "content": last + "\\n\\n" + shown}], **options)

    return collections.namedtuple("DelegatedLLM", ["chat", "credit", "calls_made"])(
        chat, lambda *a, **kw: llm.credit(*a, **kw), lambda: llm.calls_made()
    )


def run(task, llm, tools):
    return @INNER@(task, delegated_@K@(llm, tools), tools)
"""


def delegate(source: str, ctx: Context, tool: str) -> str | None:
    spec = next((t for t in ctx.tools if t.name == tool), None)
    if spec is None or spec.params is None or len(spec.params) > 1 or not tool.isidentifier():
        return None
    if spec.params and ctx.calls_per_rollout + 1 > MAX_MODEL_CALLS:
        return None
    inner = wrapped_name(source)
    param = spec.params[0] if spec.params else ""
    ask = f"Give only the {param} to pass to the tool {tool}, on one line, as: {param}: <{param}>"
    body = ASK_FOR_ARGUMENT.replace("@PARAM@", re.escape(param)) if param else CALL_DIRECTLY
    code = DELEGATED.replace("@BODY@", body).replace("@K@", inner.removeprefix("run_v"))
    code = code.replace("@INNER@", inner).replace("@ASK@", repr(ask if param else "")).replace("@TOOL@", tool)
    return rename_run(source, inner) + code


MECHANISMS = {
    "votes": votes, "retry": retry, "snap": snap, "demos": demos, "plan": plan, "delegate": delegate,
    "operands": operands,
}  # fmt: skip
PER_TOOL = {"delegate": delegate, "snap": snap_tool, "operands": operands}  # one variant per tool
MARKERS = {
    "votes": "N_VOTES_", "retry": "RETRIES_", "snap": "OPTIONS_KEY_", "demos": "DEMOS_",
    "plan": "PLAN_PROMPT_",
}  # fmt: skip
TOOL_MARKERS = {"delegate": "DELEGATE_TOOL_", "snap": "OPTIONS_TOOL_", "operands": "OPERANDS_TOOL_"}


def variants(name: str, ctx: Context) -> list[str]:
    """The keys a mechanism can be applied as: "snap" and "snap:<tool>" for each tool listing options,
    "delegate:<tool>" for each tool taking at most one argument, "operands:<tool>" for each tool that
    computes."""
    keys = [] if name in ("delegate", "operands") else [name]
    if name == "operands":
        keys += [f"operands:{t.name}" for t in ctx.tools if t.evaluates]
    if name == "delegate":
        keys += [f"delegate:{t.name}" for t in ctx.tools if t.params is not None and len(t.params) <= 1]
    if name == "snap":
        keys += [f"snap:{t.name}" for t in ctx.tools if t.lists_options]
    return keys


def present(key: str, source: str) -> bool:
    """The harness has this mechanism already (stacking it again would do nothing new)."""
    name, _, tool = key.partition(":")
    if tool:
        return re.search(rf"{TOOL_MARKERS[name]}\d+ = {re.escape(repr(tool))}", source) is not None
    return MARKERS[name] in source


def apply(key: str, source: str, ctx: Context) -> str | None:
    """The harness with mechanism `key` added, or None when it does not apply to this task's shape."""
    name, _, tool = key.partition(":")
    return PER_TOOL[name](source, ctx, tool) if tool else MECHANISMS[name](source, ctx)
