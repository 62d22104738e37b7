"""Hand-tuned math harness: calculator with a worked example and one retry (knobs of the seed).

UPPER_CASE constants are the knobs the search may change; the seed keeps them plain on purpose.
"""

import collections
import re

SYSTEM_PROMPT = "You are a helpful assistant. Solve the math problem."
INSTRUCTION = "Answer with a number."
CALC_INSTRUCTION = "Write one arithmetic expression that computes the answer, as: Expression: <expression>"
RETRY_PROMPT = "That did not work. Try again."
EXAMPLE_QUESTION = "Tom has 3 bags with 4 apples in each bag. He eats 2 apples. How many apples are left?"
EXAMPLE_ANSWER = "3 * 4 = 12 and 12 - 2 = 10. The answer is 10."
EXAMPLE_EXPRESSION = "Expression: 3 * 4 - 2"
USE_CALCULATOR = True
FEW_SHOT = True
N_VOTES = 1
RETRIES = 1
MAX_TOKENS = 48


def last_number(text):
    """The last number in `text` as a canonical string ("12.0" -> "12"), or None."""
    found = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    if not found:
        return None
    value = float(found[-1].replace(",", ""))
    return str(int(value)) if value.is_integer() else str(value)


def build_messages(question):
    instruction = CALC_INSTRUCTION if USE_CALCULATOR else INSTRUCTION
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    if FEW_SHOT:
        example = EXAMPLE_EXPRESSION if USE_CALCULATOR else EXAMPLE_ANSWER
        messages.append({"role": "user", "content": f"{EXAMPLE_QUESTION} {instruction}"})
        messages.append({"role": "assistant", "content": example})
    messages.append({"role": "user", "content": f"{question} {instruction}"})
    return messages


def solve(reply, tools):
    """One reply -> an answer string, or None when no usable answer is in it."""
    if not USE_CALCULATOR:
        return last_number(reply)
    match = re.search(r"expression:\s*([^\n=]+)", reply, re.IGNORECASE)
    if match is None:
        return None
    try:
        return last_number(tools.calculator(match.group(1).strip().rstrip(".")))
    except Exception:
        return None


def run(task, llm, tools):
    messages = build_messages(task["question"])
    replies = []
    for _ in range(max(0, RETRIES) + 1):
        replies = llm.chat(messages, max_tokens=max(1, MAX_TOKENS), n=max(1, N_VOTES))
        if isinstance(replies, str):
            replies = [replies]
        answers = [a for a in (solve(r, tools) for r in replies) if a is not None]
        if answers:
            return collections.Counter(answers).most_common(1)[0][0]
        messages = messages + [
            {"role": "assistant", "content": replies[0]},
            {"role": "user", "content": RETRY_PROMPT},
        ]
    fallback = last_number(replies[0]) if replies else None
    return fallback or ""
