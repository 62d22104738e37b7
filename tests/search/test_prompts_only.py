"""Fast-Slow's fast loop may change string constants only, whoever proposes the child."""

from __future__ import annotations

from whale.search.prompts_only import outside_text

PARENT = '''
INSTRUCTION = "Answer with a number."

def run(task, llm, tools):
    """Ask once."""
    reply = llm.chat([{"role": "user", "content": f"{INSTRUCTION} {task['question']}"}])
    return reply.strip()
'''


def test_a_reworded_prompt_is_a_prompt_edit():
    child = PARENT.replace("Answer with a number.", "Think, then give only the final number.")
    child = child.replace('"""Ask once."""', '"""Ask once, reworded."""')
    old, new = "f\"{INSTRUCTION} {task['question']}\"", "f\"{INSTRUCTION}\\nQ: {task['question']}\""
    child = child.replace(old, new)
    assert outside_text(PARENT, child) == ""


def test_any_change_to_the_logic_is_refused():
    for child in (
        PARENT.replace("reply.strip()", "reply.strip().split()[-1]"),  # new control of the answer
        PARENT.replace("{task['question']}", "{task['answer']}"),  # a key read inside an f-string
        PARENT.replace("    return reply.strip()", "    llm.chat([])\n    return reply.strip()"),
        PARENT + "\nRETRIES = 2\n",  # a new knob
    ):
        assert outside_text(PARENT, child) == "prompts-only: it changes code outside string constants"
    assert outside_text(PARENT, "def run(:").startswith("prompts-only: the file does not parse")
