"""Seed harness for search QA: search once with the question, answer from the top passage.

UPPER_CASE constants are the knobs the search may change; the seed keeps them plain on purpose
(one search, the top passage cut short); it only cuts a reply down to its answer span, since exact match
scores a whole sentence 0 and a seed at zero leaves the search no signal.
"""

import re

SYSTEM_PROMPT = "You are a helpful assistant. Answer the question."
INSTRUCTION = "Answer briefly."
REWRITE_INSTRUCTION = "Write a short search query for this question. Reply with the query only."
HOP_INSTRUCTION = "Which name in the passages should be searched next? Reply with the name only."
TOP_K = 1
PASSAGE_CHARS = 200
QUERY_REWRITE = False
SECOND_HOP = False
EXTRACT_SHORT = True
MAX_TOKENS = 32


def first_line(text):
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def ask(llm, content, max_tokens):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": content}]
    return llm.chat(messages, max_tokens=max(1, max_tokens))


def search(tools, query):
    """Up to TOP_K passages for `query`; a refused query (empty, too long) finds nothing."""
    try:
        return tools.search(query[:400], k=max(1, min(TOP_K, 10)))
    except Exception:
        return []


def show(passages):
    return "\n".join(f"{p['title']}: {p['text'][: max(1, PASSAGE_CHARS)]}" for p in passages)


def shorten(reply):
    """A sentence cut down to its answer span: 'He was born in Korvath.' -> 'Korvath'."""
    text = first_line(reply)
    text = re.sub(r"^(the )?(final )?answer( is)?\s*:?\s*", "", text, flags=re.IGNORECASE)
    text = re.split(r"[.!?;](?:\s|$)", text)[0]
    parts = re.split(r"\b(?:is|was|were|are|in|by|on|as|about)\b", text, flags=re.IGNORECASE)
    if len(parts) > 1 and parts[-1].strip():
        text = parts[-1]
    return text.strip(" \t\"'.,:")


def run(task, llm, tools):
    question = task["question"]
    query = question
    if QUERY_REWRITE:
        query = first_line(ask(llm, f"{question}\n{REWRITE_INSTRUCTION}", 24)) or question
    passages = search(tools, query)
    if SECOND_HOP and passages:
        entity = first_line(ask(llm, f"{show(passages)}\n\nQuestion: {question}\n{HOP_INSTRUCTION}", 16))
        titles = [p["title"] for p in passages]
        passages = passages + [p for p in search(tools, entity) if p["title"] not in titles]
    prompt = f"{show(passages)}\n\nQuestion: {question}\n{INSTRUCTION}"
    reply = ask(llm, prompt, MAX_TOKENS)
    return shorten(reply) if EXTRACT_SHORT else first_line(reply)
