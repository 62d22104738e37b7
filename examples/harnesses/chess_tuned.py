"""Hand-tuned chess harness: the legal-move list in the prompt and two retries (knobs of the seed).

UPPER_CASE constants are the knobs the search may change; the seed keeps them plain on purpose.
"""

import collections
import re

SYSTEM_PROMPT = "You are a chess player."
INSTRUCTION = "What is the best move? Answer with one move."
RETRY_PROMPT = "That move is not possible. Choose a different move."
MOVE_FORMAT = 'san'
SHOW_BOARD = False
SHOW_LEGAL_MOVES = True
RETRIES = 2
N_VOTES = 1
MAX_TOKENS = 16

format_hints = {
    "san": "Write the move in SAN, like Nf3, exd5, O-O or e8=Q.",
    "uci": "Write the move in UCI, from square then to square, like g1f3 or e7e8q.",
}
# A move-like token: UCI, castling, a piece move, or a pawn move (not part of a longer word or a FEN).
move_pattern = re.compile(
    r"(?<![\w/-])(?:[a-h][1-8][a-h][1-8][qrbn]?|O-O-O|O-O|0-0-0|0-0"
    r"|[KQRBN][a-h]?[1-8]?x?[a-h][1-8]|[a-h](?:x[a-h])?[1-8](?:=?[QRBN])?)(?![\w/-])"
)


def extract_move(reply):
    """The first move-like token in the reply, or None."""
    match = move_pattern.search(reply)
    return match.group(0) if match else None


def build_messages(fen, side, tools):
    notation = "uci" if MOVE_FORMAT == "uci" else "san"
    lines = [f"Position (FEN): {fen}", f"You play {side}. It is your move."]
    if SHOW_BOARD:
        lines.append(tools.board())
    if SHOW_LEGAL_MOVES:
        lines.append("Legal moves: " + ", ".join(tools.legal_moves()[notation]))
    lines.append(f"{INSTRUCTION} {format_hints[notation]}")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(lines)}]


def ask(llm, messages):
    """Sample N_VOTES replies; return the first reply and the most common move among them."""
    replies = llm.chat(messages, max_tokens=max(1, MAX_TOKENS), n=max(1, N_VOTES))
    if isinstance(replies, str):
        replies = [replies]
    moves = [m for m in (extract_move(r) for r in replies) if m]
    move = collections.Counter(moves).most_common(1)[0][0] if moves else None
    return replies[0], move


def play_turn(fen, side, llm, tools):
    """Ask for a move and play it, re-asking with the error after an unusable reply (up to RETRIES)."""
    messages = build_messages(fen, side, tools)
    move = None
    for _ in range(max(0, RETRIES) + 1):
        reply, move = ask(llm, messages)
        if move is None:
            error = "No move found in your answer."
        else:
            try:
                return move, tools.play(move)
            except Exception as exc:
                error = str(exc)
        messages = messages + [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": f"{error} {RETRY_PROMPT}"},
        ]
    return move, None


def run(task, llm, tools):
    fen, side, last = task["fen"], task["side"], ""
    while True:
        move, result = play_turn(fen, side, llm, tools)
        last = move or last
        if result is None or result["result"] != "correct":
            return last
        fen = result["fen"]
