"""Mate-in-one puzzles generated from a seed (random valid positions with at least one mating and one
non-mating move, half of them mirrored), and the legality check every loaded solution line passes."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

import chess
import chess.pgn

# Generator piece mix: the attacker always has a queen or rook and up to two more pieces; the defender has
# up to four, mostly pawns, which are often put beside its king as a shelter (back-rank style mates).
ATTACKER_PIECES = "QQRRRBNP"


DEFENDER_PIECES = "PPPPPRBNQ"


DEFENDER_KING_RANKS = (7, 7, 7, 7, 6, 5, 4)


PAWN_SQUARES = tuple(range(8, 56))


@dataclass(frozen=True)
class Puzzle:
    fen: str  # the position the solver moves from
    line: tuple[str, ...]  # UCI: solver, opponent, solver, ..., solver
    source: str
    mates: tuple[str, ...] = ()  # mate-in-1 only: every mating move (any of them solves)
    meta: dict[str, Any] = field(default_factory=dict)


def position_key(fen: str) -> str:
    """The FEN without its move counters: two puzzles with the same key are the same position."""
    return " ".join(fen.split()[:4])


def side_name(color: chess.Color) -> str:
    return "white" if color == chess.WHITE else "black"


def random_position(rng: random.Random) -> chess.Board:
    """Kings plus a few pieces at random, white to move, the black king usually near its back rank."""
    pieces: dict[int, chess.Piece] = {}
    black_king = chess.square(rng.randrange(8), rng.choice(DEFENDER_KING_RANKS))
    pieces[black_king] = chess.Piece(chess.KING, chess.BLACK)
    white_king = rng.randrange(64)
    while chess.square_distance(white_king, black_king) <= 1:
        white_king = rng.randrange(64)
    pieces[white_king] = chess.Piece(chess.KING, chess.WHITE)
    specs = [(chess.WHITE, rng.choice("QR"))]
    specs += [(chess.WHITE, rng.choice(ATTACKER_PIECES)) for _ in range(rng.randint(0, 2))]
    specs += [(chess.BLACK, rng.choice(DEFENDER_PIECES)) for _ in range(rng.randint(0, 4))]
    file, rank = chess.square_file(black_king), chess.square_rank(black_king)
    for color, symbol in specs:
        piece_type = chess.PIECE_SYMBOLS.index(symbol.lower())
        for _ in range(8):  # a few tries for a free square; the piece is dropped if none is found
            if piece_type == chess.PAWN and color == chess.BLACK and rng.random() < 0.7:
                square = chess.square(min(7, max(0, file + rng.randint(-1, 1))), max(1, min(6, rank - 1)))
            elif piece_type == chess.PAWN:
                square = rng.choice(PAWN_SQUARES)
            else:
                square = rng.randrange(64)
            if square not in pieces:
                pieces[square] = chess.Piece(piece_type, color)
                break
    board = chess.Board.empty()
    board.set_piece_map(pieces)
    board.turn = chess.WHITE
    return board


def mating_moves(board: chess.Board) -> tuple[list[chess.Move], int]:
    """The legal moves that checkmate at once, and how many legal moves there are in all."""
    mates, total = [], 0
    for move in board.legal_moves:
        total += 1
        board.push(move)
        if board.is_checkmate():
            mates.append(move)
        board.pop()
    return mates, total


def mirrored(move: chess.Move) -> chess.Move:
    return chess.Move(
        chess.square_mirror(move.from_square), chess.square_mirror(move.to_square), move.promotion
    )


def random_mate_in_one(rng: random.Random) -> Puzzle | None:
    """One try: a valid, not game-over position with a mating move and a non-mating one, else None.

    Half the puzzles are mirrored (colours swapped, board flipped) so black is to move."""
    board = random_position(rng)
    if not board.is_valid() or board.is_game_over():
        return None
    mates, total = mating_moves(board)
    if not mates or total == len(mates):
        return None
    if rng.random() < 0.5:
        board, mates = board.mirror(), [mirrored(m) for m in mates]
    ucis = sorted(m.uci() for m in mates)
    return Puzzle(board.fen(), (ucis[0],), "mate1", tuple(ucis))


def generate_mate_in_one(seed: int | str, n: int, exclude: set[str] | None = None) -> list[Puzzle]:
    """`n` mate-in-1 puzzles with distinct positions (none whose `position_key` is in `exclude`)."""
    rng = random.Random(seed)
    seen = set(exclude or ())
    puzzles: list[Puzzle] = []
    attempts = 0
    while len(puzzles) < n:
        attempts += 1
        if attempts > 1000 * n + 10_000:
            raise ValueError(f"could not generate {n} distinct mate-in-1 puzzles")
        puzzle = random_mate_in_one(rng)
        if puzzle is not None and position_key(puzzle.fen) not in seen:
            seen.add(position_key(puzzle.fen))
            puzzles.append(puzzle)
    return puzzles


def check_line(board: chess.Board, moves: list[str]) -> str | None:
    """Why `moves` (UCI) is not a playable solution line from `board`, or None when it is."""
    if board.is_game_over():
        return "the puzzle position is already game over"
    if len(moves) % 2 == 0:
        return f"the solution has {len(moves)} moves; it must end with the solver's move (an odd count)"
    board = board.copy(stack=False)
    for i, text in enumerate(moves, start=1):
        try:
            move = chess.Move.from_uci(text)
        except ValueError:
            return f"solution move {i} {text!r} is not UCI"
        if not board.is_legal(move):
            return f"solution move {i} {text!r} is illegal in {board.fen()}"
        board.push(move)
    return None


UCI_MOVE = re.compile(r"[a-h][1-8][a-h][1-8][qrbn]?")
