"""Minimal seed for search QA (a control, `domain.minimal_seed`): the top passage of one search for the
question, the question, and the reply's first line."""


def run(task, llm, tools):
    hits = tools.search(task["question"], k=1)
    context = hits[0]["text"] + "\n\n" if hits else ""
    reply = llm.chat([{"role": "user", "content": context + task["question"]}])
    lines = [line.strip() for line in reply.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""
