"""Puzzle files a user brings: Lichess's puzzle CSV and PGN files (one puzzle per game: the [FEN] tag is
the position, the main line the solution; Lichess study exports included, where a chapter stating
"mate in 1" with no moves is a puzzle any mate solves). Every puzzle is replayed
from its FEN with python-chess and checked against its goal before a run starts: a mate must mate, and
text that is not a move (a file cut short mid-move) is never silently dropped. A bad puzzle is skipped
with a `path:line: reason`; only file-level problems (a missing header, an undecodable byte) raise."""

from __future__ import annotations

import contextlib
import csv
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chess
import chess.pgn

from whale.domains.chess_puzzles import UCI_MOVE, Puzzle, check_line, mating_moves
from whale.domains.user_files import FileError, text_lines

LICHESS_COLUMNS = ("PuzzleId", "FEN", "Moves")
GOALS = ("mate", "line")  # mate: a line must end in checkmate unless the source states another goal
RESULTS = ("1-0", "0-1", "1/2-1/2", "*")
SAN = r"(?:[NBKRQ]?[a-h]?[1-8]?[\-x]?[a-h][1-8](?:=?[nbrqkNBRQK])?|O-O(?:-O)?|0-0(?:-0)?|--|Z0|0000|@@@@)"
MOVE_TOKEN = re.compile(
    rf"{SAN}[+#]?[?!]{{0,2}}|\$[0-9]+|[?!]{{1,2}}|e\.p\.|[+\-=/]{{1,3}}|1-0|0-1|1/2-1/2|\*"
)
MOVE_NUMBER = re.compile(r"[0-9]+\.+")
STATED_MATE = re.compile(r"mate in ([0-9]+)", re.IGNORECASE)


@dataclass
class LoadedPuzzles:
    """What a file gave: the puzzles that passed, each skipped one as `path:line: reason`, and why."""

    puzzles: list[Puzzle] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    kinds: Counter = field(default_factory=Counter)
    encoding: str = ""

    def skip(self, where: str, kind: str, detail: str = "") -> None:
        self.skipped.append(f"{where}: {kind}{': ' + detail if detail else ''}")
        self.kinds[kind] += 1

    def summary(self) -> str:
        reasons = ", ".join(f"{kind} {n}" for kind, n in self.kinds.most_common())
        return f"loaded {len(self.puzzles)}, skipped {len(self.skipped)}" + (
            f" ({reasons})" if reasons else ""
        )


def load_lichess_csv(path: str | Path, encoding: str = "auto", goal: str = "mate") -> LoadedPuzzles:
    """Lichess puzzle rows. The first of `Moves` is the opponent's and is played to form the puzzle
    position; the rest is the solution line. A row whose Themes include a mate must end in checkmate
    (goal "mate"); others are lines to find, as Lichess gives them."""
    out = LoadedPuzzles()
    out.encoding, lines = text_lines(path, encoding)
    with contextlib.closing(_csv_rows(path, lines)) as rows:
        _, header = next(rows, (1, None))
        if header is None or any(c not in header for c in LICHESS_COLUMNS):
            raise ValueError(f"{path}:1: expected a header with columns {', '.join(LICHESS_COLUMNS)}")
        col = {name: i for i, name in enumerate(header)}
        for lineno, row in rows:
            if row and "".join(row).strip():
                _lichess_row(out, f"{path}:{lineno}", row, col, goal, lineno)
    return out


def _lichess_row(
    out: LoadedPuzzles, where: str, row: list[str], col: dict[str, int], goal: str, line: int
) -> None:
    if len(row) != len(col):
        return out.skip(where, "wrong column count", f"expected {len(col)}, got {len(row)}")
    fen = row[col["FEN"]]
    try:
        board = chess.Board(fen)
    except ValueError:
        return out.skip(where, "invalid FEN", _shown(fen))
    if not board.is_valid():
        return out.skip(where, "illegal position", f"FEN {_shown(fen)}")
    moves = row[col["Moves"]].split()
    if len(moves) < 2:
        return out.skip(where, "no solution moves", "Moves needs the opponent's move and a solution")
    try:
        opening = UCI_MOVE.fullmatch(moves[0]) and chess.Move.from_uci(moves[0])
    except ValueError:  # well-formed but no move, e.g. a1a1
        opening = None
    if not opening or not board.is_legal(opening):
        first = _shown(moves[0])
        return out.skip(where, "illegal move", f"the opponent's first move {first} is not legal UCI")
    board.push(opening)
    meta: dict[str, Any] = {"puzzle_id": row[col["PuzzleId"]], "file_line": line}
    if "Rating" in col:
        rating = row[col["Rating"]].strip()
        if not re.fullmatch(r"-?[0-9]{1,9}", rating):
            return out.skip(where, "bad rating", f"Rating {_shown(rating)} is not an integer")
        meta["rating"] = int(rating)
    themes = row[col["Themes"]].split() if "Themes" in col else []
    if themes:
        meta["themes"] = themes
    stated = next((t for t in themes if t.lower().startswith("mate")), None)
    _accept(out, where, board, moves[1:], "lichess", meta, stated if goal == "mate" else None)


def _accept(
    out: LoadedPuzzles, where: str, board: chess.Board, moves: list[str], source: str, meta: dict,
    mate: str | None,
) -> None:  # fmt: skip
    """Check the line (and, when `mate` names a stated mate goal, that it mates) and keep the puzzle."""
    problem = check_line(board, moves)
    if problem is not None:
        kind = "illegal move" if "illegal" in problem or "not UCI" in problem else "line ends on the opponent"
        return out.skip(where, kind, problem)
    if mate is not None:
        end = board.copy(stack=False)
        for move in moves:
            end.push_uci(move)
        if not end.is_checkmate():
            return out.skip(
                where, "no checkmate", f"the goal is {mate!r}; the line's last position is not mate"
            )
        wanted, solver_moves = STATED_MATE.search(mate), (len(moves) + 1) // 2
        if wanted and solver_moves != int(wanted.group(1)):
            return out.skip(where, "wrong length", f"the goal is {mate!r}; the line mates in {solver_moves}")
    out.puzzles.append(Puzzle(board.fen(), tuple(moves), source, meta=meta))


def _csv_rows(path: str | Path, lines: Iterator[str]) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each CSV record, streamed; CSV errors name path:line."""
    reader = csv.reader(_without_bom(lines))
    while True:
        try:
            row = next(reader, None)
        except csv.Error as e:  # an unterminated quote, a field over csv's size limit
            raise ValueError(f"{path}:{reader.line_num}: malformed CSV ({e})") from None
        if row is None:
            return
        yield reader.line_num, row


def _without_bom(lines: Iterator[str]) -> Iterator[str]:
    for i, line in enumerate(lines):
        yield line.lstrip("\ufeff") if i == 0 else line


def _shown(text: str, limit: int = 100) -> str:
    """repr(text) for an error message, cut to `limit` characters (a field may be huge)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


class StrictGameBuilder(chess.pgn.GameBuilder):
    """Raise on the first PGN error instead of logging it and carrying on."""

    def handle_error(self, error: Exception) -> None:
        raise error


class GameLines:
    """A text handle for chess.pgn that keeps the lines of the current game, and where it starts."""

    def __init__(self, lines: Iterator[str]):
        self.lines = _without_bom(lines)
        self.lineno = 0
        self.game: list[str] = []
        self.game_start = 0

    def next_game(self) -> None:
        self.game, self.game_start = [], 0

    def readline(self) -> str:
        line = next(self.lines, "")
        if line:
            self.lineno += 1
            self.game.append(line)
            if not self.game_start and line.strip():
                self.game_start = self.lineno
        return line


def unreadable_movetext(lines: list[str]) -> str | None:
    """The first token of a game's movetext that is not a move, number, comment, annotation or result,
    or why its end is missing: python-chess skips such text without a word, so a file cut short at
    `1. Qd8+ Bx` would otherwise load as a one-move puzzle."""
    body = "".join(line for line in lines if not line.lstrip().startswith(("[", "%")))
    body = re.sub(r"\{[^}]*\}?|;[^\n]*", " ", body).replace("(", " ").replace(")", " ")
    tokens = []
    for token in body.split():
        rest = MOVE_NUMBER.sub("", token, count=1) if MOVE_NUMBER.match(token) else token
        if rest and not MOVE_TOKEN.fullmatch(rest):
            return f"text that is not a move: {_shown(token, 40)}"
        tokens.append(rest)
    if not any(t in RESULTS for t in tokens[-1:]):
        return "the game ends without a result (1-0, 0-1, 1/2-1/2 or *): the file may be cut short"
    return None


def load_pgn_puzzles(path: str | Path, encoding: str = "auto", goal: str = "mate") -> LoadedPuzzles:
    """PGN games whose [FEN] tag is the puzzle position and whose mainline is the solution. Goal "mate":
    a line must end in checkmate (in N moves when [Termination "mate in N"] says so); a stated goal that
    is not a mate ("+300cp in 2") cannot be checked and skips the game. Goal "line": any legal line."""
    out = LoadedPuzzles()
    out.encoding, lines = text_lines(path, encoding)
    reader = GameLines(lines)
    while True:
        reader.next_game()
        try:
            game = chess.pgn.read_game(reader, Visitor=StrictGameBuilder)  # type: ignore[arg-type]
            error = None
        except FileError:
            raise
        except ValueError as e:
            game, error = None, " ".join(str(e).split())[:300]
        lineno = reader.game_start or max(reader.lineno, 1)
        if error is not None:
            out.skip(f"{path}:{lineno}", "unreadable game", error)
            _skip_to_next_game(reader)
            continue
        if game is None:
            return out
        _pgn_game(out, f"{path}:{lineno}", lineno, game, reader.game, goal)


def _skip_to_next_game(reader: GameLines) -> None:
    """After an error mid-game, read on to the blank line that ends it, so the next game starts clean."""
    while True:
        line = reader.readline()
        if not line or not line.strip():
            return


def _pgn_game(
    out: LoadedPuzzles, where: str, lineno: int, game: chess.pgn.Game, lines: list[str], goal: str
) -> None:
    fen = game.headers.get("FEN")
    if not fen:
        return out.skip(where, "no [FEN] tag", "the game has no puzzle position")
    board = game.board()
    if type(board) is not chess.Board or board.chess960:  # the toolbox plays standard chess only
        return out.skip(where, "variant", f"{_shown(game.headers.get('Variant', ''))} (standard chess only)")
    if not board.is_valid():
        return out.skip(where, "illegal position", f"FEN {_shown(fen)}")
    problem = unreadable_movetext(lines)
    if problem is not None:
        return out.skip(where, "unreadable move text", problem)
    moves = [m.uci() for m in game.mainline_moves()]
    stated = game.headers.get("Termination", "").strip()
    if not moves:
        wanted = STATED_MATE.fullmatch(stated)
        mates = sorted(m.uci() for m in mating_moves(board)[0]) if wanted and wanted.group(1) == "1" else []
        if not mates:  # a longer stated mate without its line would need an engine to defend
            return out.skip(where, "no solution moves", f"goal {_shown(stated)}" if stated else "")
        meta = {"file_line": lineno, **{k: v for k, v in game.headers.items() if k in ("Event", "Site")}}
        out.puzzles.append(Puzzle(board.fen(), (mates[0],), "pgn", tuple(mates), meta))  # any mate solves
        return None
    if goal == "mate" and stated and not STATED_MATE.search(stated):
        return out.skip(where, "goal not a mate", f"{_shown(stated)} cannot be checked (goal: line loads it)")
    meta: dict[str, Any] = {"file_line": lineno}
    meta.update({k: v for k, v in game.headers.items() if k in ("Event", "Site", "Termination")})
    _accept(out, where, board, moves, "pgn", meta, (stated or "mate") if goal == "mate" else None)
