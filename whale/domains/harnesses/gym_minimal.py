"""Minimal seed for reasoning-gym tasks (a control, `domain.minimal_seed`): the question alone, and the
reply's last non-empty line."""


def run(task, llm, tools):
    lines = [line.strip() for line in llm.chat([{"role": "user", "content": task["question"]}]).splitlines()]
    lines = [line for line in lines if line]
    return lines[-1] if lines else ""
