"""Seed harness for reasoning-gym tasks: ask once for the final answer alone, and return what follows
"Answer:" if the model wrote it, else the reply's last non-empty line.

UPPER_CASE constants are the knobs the search may change; the seed keeps them plain on purpose.
"""

SYSTEM_PROMPT = "You are a careful problem solver."
INSTRUCTION = "Give only the final answer, on one line, as: Answer: <answer>"
MAX_TOKENS = 64


def final_answer(reply):
    for line in reversed(reply.strip().splitlines()):
        if "Answer:" in line:
            return line.split("Answer:", 1)[1].strip()
    lines = [line.strip() for line in reply.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run(task, llm, tools):
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task["question"] + "\n\n" + INSTRUCTION},
    ]
    return final_answer(llm.chat(messages, max_tokens=MAX_TOKENS))
