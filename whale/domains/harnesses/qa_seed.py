"""Seed harness for question answering on a user's data: ask once (listing the choices with letters
when the task has them) and return what follows "Answer:", else the reply's last non-empty line.

UPPER_CASE constants are the knobs the search may change; the seed keeps them plain on purpose.
"""

SYSTEM_PROMPT = "You are a careful assistant. Answer the question."
INSTRUCTION = "Give only the final answer, on one line, as: Answer: <answer>"
MAX_TOKENS = 64
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def final_answer(reply):
    for line in reversed(reply.strip().splitlines()):
        if "Answer:" in line:
            return line.split("Answer:", 1)[1].strip()
    lines = [line.strip() for line in reply.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def build_prompt(task):
    text = task["question"]
    for i, choice in enumerate(task.get("choices") or []):
        text += "\n" + LETTERS[i % len(LETTERS)] + ". " + choice
    return text + "\n\n" + INSTRUCTION


def run(task, llm, tools):
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": build_prompt(task)},
    ]
    return final_answer(llm.chat(messages, max_tokens=MAX_TOKENS))
