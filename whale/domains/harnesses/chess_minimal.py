"""Minimal seed for chess puzzles (a control, `domain.minimal_seed`): the position's FEN, one question per
turn, and the reply's first move-like token, played until the line ends."""

import re

MOVE = re.compile(r"O-O-O|O-O|[a-h][1-8][a-h][1-8][qrbn]?|[KQRBN]?[a-h]?[1-8]?x?[a-h][1-8](?:=?[QRBN])?")


def run(task, llm, tools):
    fen, move = task["fen"], ""
    while True:
        found = MOVE.search(llm.chat([{"role": "user", "content": f"{fen}\nYour move?"}]))
        if found is None:
            return move
        move = found.group(0)
        try:
            result = tools.play(move)
        except Exception:
            return move
        if result["result"] != "correct":
            return move
        fen = result["fen"]
