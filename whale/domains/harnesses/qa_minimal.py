"""Minimal seed for question answering on a user's data (a control, `domain.minimal_seed`): the question
with its choices lettered when it has them, and the reply's last non-empty line."""


def run(task, llm, tools):
    text = task["question"]
    for i, choice in enumerate(task.get("choices") or []):
        text += f"\n{'ABCDEFGHIJKLMNOPQRSTUVWXYZ'[i % 26]}. {choice}"
    lines = [line.strip() for line in llm.chat([{"role": "user", "content": text}]).splitlines()]
    lines = [line for line in lines if line]
    return lines[-1] if lines else ""
