"""Hand-written math harness: the model picks the operation, the harness does the arithmetic.

A 135M model rarely computes 34 + 40 correctly but can often tell "buys more" from "gives away".
The numbers come from the question text, the majority of N_VOTES sampled answers picks the operation,
and the calculator tool computes the result. Falls back to the model's own answer for other shapes.
"""

import collections
import re

SYSTEM_PROMPT = "You read math word problems and say which operation solves them."
QUESTION = "Which operation solves this problem: add, subtract, multiply or divide? Answer with one word."
N_VOTES = 5
MAX_TOKENS = 6

OPERATIONS = {
    "add": "+", "plus": "+", "sum": "+", "addition": "+", "total": "+",
    "subtract": "-", "minus": "-", "subtraction": "-", "difference": "-",
    "multiply": "*", "times": "*", "multiplication": "*", "product": "*",
    "divide": "/", "division": "/", "split": "/", "share": "/",
}  # fmt: skip


def operation_of(reply):
    for word in re.findall(r"[a-z]+", reply.lower()):
        if word in OPERATIONS:
            return OPERATIONS[word]
    return None


def run(task, llm, tools):
    question = task["question"]
    numbers = re.findall(r"\d+", question)
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{question}\n{QUESTION}"},
    ]
    replies = llm.chat(messages, max_tokens=MAX_TOKENS, n=N_VOTES)
    if isinstance(replies, str):
        replies = [replies]
    votes = [op for op in (operation_of(r) for r in replies) if op]
    if len(numbers) != 2 or not votes:
        answer = llm.chat([{"role": "user", "content": f"{question} Answer with a number."}], max_tokens=32)
        found = re.findall(r"\d+", answer)
        return found[-1] if found else ""
    op = collections.Counter(votes).most_common(1)[0][0]
    a, b = int(numbers[0]), int(numbers[1])
    if op in "-/" and b > a:
        a, b = b, a
    return tools.calculator(f"{a} {op} {b}")
