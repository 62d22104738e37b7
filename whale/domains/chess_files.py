"""Puzzle files a user brings: Lichess's puzzle CSV and PGN games whose main line is the solution. Each
line is replayed from its FEN with python-chess; an error names the file and line."""

from __future__ import annotations

import contextlib
import csv
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chess
import chess.pgn

from whale.domains.base import utf8_error
from whale.domains.chess_puzzles import UCI_MOVE, Puzzle, check_line

LICHESS_COLUMNS = ("PuzzleId", "FEN", "Moves")


def load_lichess_csv(path: str | Path) -> list[Puzzle]:
    """Lichess puzzle rows. The first of `Moves` is the opponent's and is played to form the puzzle
    position; the rest is the solution line. A malformed row fails with `path:line: reason`."""
    puzzles = []
    with contextlib.closing(_csv_rows(path)) as rows:
        _, header = next(rows, (1, None))
        if header is None or any(c not in header for c in LICHESS_COLUMNS):
            raise ValueError(f"{path}:1: expected a header with columns {', '.join(LICHESS_COLUMNS)}")
        col = {name: i for i, name in enumerate(header)}
        for lineno, row in rows:
            if not row or not "".join(row).strip():
                continue
            if len(row) != len(header):
                raise ValueError(f"{path}:{lineno}: expected {len(header)} columns, got {len(row)}")
            fen = row[col["FEN"]]
            try:
                board = chess.Board(fen)
            except ValueError:
                raise ValueError(f"{path}:{lineno}: invalid FEN {_shown(fen)}") from None
            if not board.is_valid():
                raise ValueError(f"{path}:{lineno}: FEN {_shown(fen)} is not a legal position")
            moves = row[col["Moves"]].split()
            if len(moves) < 2:
                raise ValueError(f"{path}:{lineno}: Moves needs the opponent's move and a solution")
            try:
                opening = UCI_MOVE.fullmatch(moves[0]) and chess.Move.from_uci(moves[0])
            except ValueError:  # well-formed but no move, e.g. a1a1
                opening = None
            if not opening or not board.is_legal(opening):
                raise ValueError(
                    f"{path}:{lineno}: the opponent's first move {_shown(moves[0])} is not legal UCI"
                )
            board.push(opening)
            problem = check_line(board, moves[1:])
            if problem is not None:
                raise ValueError(f"{path}:{lineno}: {problem}")
            meta: dict[str, Any] = {"puzzle_id": row[col["PuzzleId"]], "file_line": lineno}
            if "Rating" in col:
                rating = row[col["Rating"]].strip()
                if not re.fullmatch(r"-?[0-9]{1,9}", rating):
                    raise ValueError(f"{path}:{lineno}: Rating {_shown(rating)} is not an integer")
                meta["rating"] = int(rating)
            if "Themes" in col:
                meta["themes"] = row[col["Themes"]].split()
            puzzles.append(Puzzle(board.fen(), tuple(moves[1:]), "lichess", meta=meta))
    return puzzles


def _csv_rows(path: str | Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each CSV record, streamed; decoding and CSV errors name path:line."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        while True:
            try:
                row = next(reader, None)
            except UnicodeDecodeError:
                raise utf8_error(path) from None
            except csv.Error as e:  # an unterminated quote, a field over csv's size limit
                raise ValueError(f"{path}:{reader.line_num}: malformed CSV ({e})") from None
            if row is None:
                return
            yield reader.line_num, row


def _shown(text: str, limit: int = 100) -> str:
    """repr(text) for an error message, cut to `limit` characters (a field may be huge)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


class StrictGameBuilder(chess.pgn.GameBuilder):
    """Raise on the first PGN error instead of logging it and carrying on."""

    def handle_error(self, error: Exception) -> None:
        raise error


class LineCountingReader:
    """A text handle for chess.pgn that remembers the first non-blank line of the current game."""

    def __init__(self, f: Any):
        self.f = f
        self.lineno = 0
        self.game_start = 0

    def readline(self) -> str:
        line = self.f.readline()
        if line:
            self.lineno += 1
            if not self.game_start and line.strip():
                self.game_start = self.lineno
        return line


def load_pgn_puzzles(path: str | Path) -> list[Puzzle]:
    """PGN games whose [FEN] tag is the puzzle position and whose mainline is the solution line."""
    puzzles = []
    with open(path, encoding="utf-8-sig") as f:
        reader = LineCountingReader(f)
        while True:
            reader.game_start = 0
            try:
                game = chess.pgn.read_game(reader, Visitor=StrictGameBuilder)  # type: ignore[arg-type]
            except UnicodeDecodeError:
                raise utf8_error(path) from None
            except ValueError as e:
                message = " ".join(str(e).split())[:300]
                raise ValueError(f"{path}:{reader.game_start or max(reader.lineno, 1)}: {message}") from None
            if game is None:
                break
            lineno = reader.game_start
            fen = game.headers.get("FEN")
            if not fen:
                raise ValueError(f"{path}:{lineno}: game has no [FEN] tag with the puzzle position")
            board = game.board()
            if type(board) is not chess.Board or board.chess960:  # the toolbox plays standard chess only
                variant = _shown(game.headers.get("Variant", ""))
                raise ValueError(f"{path}:{lineno}: variant {variant} is not supported (standard chess only)")
            if not board.is_valid():
                raise ValueError(f"{path}:{lineno}: FEN {_shown(fen)} is not a legal position")
            moves = [m.uci() for m in game.mainline_moves()]
            if not moves:
                raise ValueError(f"{path}:{lineno}: game has no solution moves")
            problem = check_line(board, moves)
            if problem is not None:
                raise ValueError(f"{path}:{lineno}: {problem}")
            meta = {"file_line": lineno, **{k: v for k, v in game.headers.items() if k in ("Event", "Site")}}
            puzzles.append(Puzzle(board.fen(), tuple(moves), "pgn", meta=meta))
    return puzzles
