"""The chess domain: puzzles played move by move through tools, scored 1 only when solved.

Puzzles come from a seeded mate-in-1 generator (random placements checked with python-chess, so every
split is reproducible and needs no download), from a Lichess puzzle CSV, or from PGN games with a [FEN]
tag. A puzzle is a start position plus a solution line in UCI: solver moves with the opponent's replies
interleaved, starting and ending with a solver move. The per-rollout `ChessToolbox` holds the board and
the progress through the line, and `verify` reads its outcome.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from typing import Any

import chess
import chess.pgn

from whale.domains.base import SPLITS
from whale.domains.chess_files import GOALS, load_lichess_csv, load_pgn_puzzles
from whale.domains.chess_puzzles import UCI_MOVE, Puzzle, generate_mate_in_one, position_key, side_name
from whale.harness.task import Task, ToolError

DEFAULT_SIZES = {"train": 2000, "search": 32, "val": 32, "test": 64}
SOURCES = ("mate1", "lichess", "pgn")
SKIPS_SHOWN = 5  # skipped puzzles listed one by one on stderr; the summary counts them all
MAX_MOVE_CHARS = 16


# ---------------------------------------------------------------------------------------------------------
# Generated mate-in-1 puzzles


# ---------------------------------------------------------------------------------------------------------
# Loaded puzzles


# ---------------------------------------------------------------------------------------------------------
# Tools


class ChessToolbox:
    """One rollout's board and its progress through the solution line.

    `status` is "playing", "solved", "failed" or, for a position with no known line (an agent given a
    new FEN), "played" after a legal move that does not mate. Malformed or illegal moves raise ToolError
    and use up the retry budget: with `retries` = k the harness may make k such mistakes and go on; the
    next one fails the puzzle, and after that every play raises "no retries left"."""

    names = ("board", "side_to_move", "legal_moves", "play")

    def __init__(self, fen: str, line: list[str] | tuple[str, ...] | None, retries: int = 2):
        self.position = chess.Board(fen)
        self.solver = self.position.turn
        self.line = list(line or ())
        self.ply = 0  # index in `line` of the solver's next expected move
        self.retries_left = retries
        self.exhausted = False
        self.status = "playing"
        self.play_calls = 0
        self.played: list[str] = []  # the solver's moves, SAN

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if name == "play":
            self.play_calls += 1
            if len(args) == 1 and not kwargs:
                return self.play(args[0])
            if not args and set(kwargs) == {"move"}:
                return self.play(kwargs["move"])
            raise ToolError("play takes exactly one argument: play(move: str), e.g. play('Nf3')")
        if name not in self.names:
            raise ToolError(f"unknown tool {name!r}; available: {', '.join(self.names)}")
        if args or kwargs:
            raise ToolError(f"{name}() takes no arguments")
        return {"board": self.board, "side_to_move": self.side_to_move, "legal_moves": self.legal_moves}[
            name
        ]()

    def board(self) -> str:
        """The diagram (rank 8 on top, uppercase white, '.' empty) with coordinates, then the FEN."""
        rows = [f"{8 - i} {row}" for i, row in enumerate(str(self.position).splitlines())]
        return "\n".join([*rows, "  a b c d e f g h", f"FEN: {self.position.fen()}"])

    def side_to_move(self) -> str:
        return side_name(self.position.turn)

    def legal_moves(self) -> dict[str, list[str]]:
        """The same moves in both notations, in the same order; SAN without check or mate marks."""
        moves = list(self.position.legal_moves)
        return {
            "san": [self.position.san(m).rstrip("+#") for m in moves],
            "uci": [m.uci() for m in moves],
        }

    def reject(self, reason: str) -> ToolError:
        if self.retries_left > 0:
            self.retries_left -= 1
            n = self.retries_left
            return ToolError(f"{reason}; {n} {'retry' if n == 1 else 'retries'} left, try another move")
        self.exhausted, self.status = True, "failed"
        return ToolError(f"{reason}; no retries left, the puzzle is failed")

    def parse(self, move: Any) -> chess.Move:
        if not isinstance(move, str):
            raise self.reject(f"a move must be a string like 'Nf3' or 'g1f3', got {type(move).__name__}")
        text = re.sub(r"^\d+\.+\s*", "", move.strip()).rstrip("!?+#. ")
        shown = repr(move if len(move) <= 40 else move[:40] + "...")
        if not text:
            raise self.reject(f"empty move {shown}")
        if len(text) > MAX_MOVE_CHARS or re.search(r"\s", text):
            raise self.reject(f"malformed move {shown}: give one move in SAN (Nf3, exd5, O-O) or UCI (g1f3)")
        side = self.side_to_move()
        if UCI_MOVE.fullmatch(text.lower()):
            try:
                parsed = chess.Move.from_uci(text.lower())
            except ValueError:  # a1a1: well-formed but no move at all
                parsed = None
            if parsed is None or not self.position.is_legal(parsed):
                raise self.reject(f"illegal move {shown}: not a legal move for {side} in this position")
            return parsed
        try:
            parsed = self.position.parse_san(text.replace("0", "O"))
        except chess.AmbiguousMoveError:
            raise self.reject(f"ambiguous move {shown}: name the moving piece's file or rank") from None
        except chess.IllegalMoveError:
            raise self.reject(f"illegal move {shown}: not a legal move for {side} in this position") from None
        except ValueError:
            raise self.reject(
                f"malformed move {shown}: give one move in SAN (Nf3, exd5, O-O, e8=Q) or UCI (g1f3, e7e8q)"
            ) from None
        if not parsed:  # parse_san reads "--" and "Z0" as the null move
            raise self.reject(f"illegal move {shown}: passing is not a move")
        return parsed

    def outcome(self, ok: bool, result: str, san: str | None, reply: str | None, message: str) -> dict:
        return {
            "ok": ok,
            "result": result,
            "move": san,
            "opponent_reply": reply,
            "fen": self.position.fen(),
            "message": message,
        }

    def play(self, move: Any) -> dict[str, Any]:
        if self.exhausted:
            raise ToolError("no retries left: the puzzle is failed")
        if self.status != "playing":
            result = "solved" if self.status == "solved" else "wrong"
            return self.outcome(False, result, None, None, f"the puzzle is already over ({self.status})")
        parsed = self.parse(move)
        san = self.position.san(parsed)
        self.position.push(parsed)
        self.played.append(san)
        if not self.line:  # a new position: a mate solves it, any other legal move is simply played
            self.status = "solved" if self.position.is_checkmate() else "played"
            result = "solved" if self.status == "solved" else "played"
            return self.outcome(
                True, result, san, None, f"{san} is {'mate' if result == 'solved' else 'played'}"
            )
        expected = self.line[self.ply]
        if parsed.uci() == expected:
            self.ply += 1
        elif self.position.is_checkmate():  # a different mate also solves
            self.ply = len(self.line)
        else:
            self.status = "failed"
            return self.outcome(False, "wrong", san, None, f"{san} is not the solution; the puzzle is failed")
        if self.ply >= len(self.line):
            self.status = "solved"
            return self.outcome(True, "solved", san, None, f"{san} is correct; the puzzle is solved")
        reply = chess.Move.from_uci(self.line[self.ply])
        reply_san = self.position.san(reply)
        self.position.push(reply)
        self.ply += 1
        return self.outcome(
            True, "correct", san, reply_san, f"{san} is correct; the opponent replied {reply_san}, your move"
        )


# ---------------------------------------------------------------------------------------------------------
# Domain

BRIEF = """\
Chess puzzles. Each task gives task["fen"], the puzzle position in FEN, and task["side"] ("white" or \
"black"), the side the solver plays; the solver is to move. Generated puzzles are mate in 1: any \
checkmating move solves them. Puzzles loaded from Lichess or PGN files are lines of several moves: after \
each correct move the opponent's reply is played automatically, and a checkmating move always solves.
The harness `run(task, llm, tools) -> str` plays moves with tools.play and returns the last move it played.
Model: a small chat model (about 135M parameters) behind llm.chat(messages, max_tokens=None, \
temperature=None, stop=None, n=1); keep prompts short and plain, it follows long instructions badly.
Tools (one board per rollout; it advances as moves are played):
- tools.board() -> text diagram (rank 8 on top, uppercase = white, '.' = empty, with coordinates) + FEN.
- tools.side_to_move() -> "white" or "black".
- tools.legal_moves() -> {"san": [...], "uci": [...]}: the same moves in the same order (SAN without +/#).
- tools.play(move) plays a move given in SAN ("Qxh7", "O-O", "e8=Q") or UCI ("d3h7"). It returns \
{"ok", "result", "move", "opponent_reply", "fen", "message"}, where result is "correct" (the opponent \
replied, fen is the new position, play on), "solved", or "wrong" (a legal move that is not the \
solution: the puzzle is failed). A malformed or illegal move raises an exception saying why and how many \
retries are left: {retries} such mistakes are allowed per puzzle, the next fails it.
Score: 1 when the puzzle is solved, else 0. A harness that never calls play has its returned answer \
played as the first move.
Rules: the model chooses the moves. The harness may show it the FEN, the board, the legal moves and its \
errors, and may map a reply to the legal move it names, but must not choose or rank moves by chess logic \
of its own (no search, no mate detection; chess cannot be imported), and must not hard-code answers or \
recognise specific positions."""

KNOB_POOL: dict[str, list[Any]] = {
    "SYSTEM_PROMPT": [
        "You are a chess player.",
        "You are a strong chess player. You solve chess puzzles.",
        "You are a chess grandmaster. Find the winning move.",
        "You solve chess puzzles. Reply with one move only.",
        "You are a chess engine. Output the best move.",
    ],
    "INSTRUCTION": [
        "What is the best move? Answer with one move.",
        "Find the checkmate. Answer with one move.",
        "Find the best move for the side to move. Reply with the move only.",
        "Look for checks and captures first. Which move wins? Answer with one move.",
        "Best move:",
    ],
    "RETRY_PROMPT": [
        "That move is not possible. Choose a different move.",
        "Illegal move. Pick one of the legal moves.",
        "Try again with a legal move, written the same way as the examples.",
        "That did not work. Give another move.",
        "Wrong format or illegal move. Reply with one legal move only.",
    ],
    "MOVE_FORMAT": ["san", "uci"],  # the only two notations tools.play and tools.legal_moves know
}


def to_task(puzzle: Puzzle, task_id: str) -> Task:
    board = chess.Board(puzzle.fen)
    gold: dict[str, Any] = {"line": list(puzzle.line)}
    if puzzle.mates:
        gold["mates"] = list(puzzle.mates)
    meta = {"source": puzzle.source, "solver_moves": (len(puzzle.line) + 1) // 2, **puzzle.meta}
    return Task(task_id, {"fen": puzzle.fen, "side": side_name(board.turn)}, gold, meta)


def answer_candidates(answer: str) -> list[str]:
    """The answer as given, then its last word without punctuation ("I play Qh7#." -> "Qh7#")."""
    text = answer.strip()
    words = text.split()
    last = words[-1].strip(".,;:!?\"'()[]") if words else ""
    return [c for c in dict.fromkeys([text, last]) if c]


class ChessDomain:
    """Chess puzzles: generated mate-in-1 (default) or loaded from a Lichess CSV / PGN file.

    Splits are disjoint by position. Generated splits are drawn test, val, search, train from seeded
    generators (evaluation splits do not depend on the train size); loaded puzzles are deduplicated by
    position, ordered by a hash of the seed and position, and dealt to test, val, search, then train."""

    name = "chess"

    def __init__(
        self,
        seed: int = 0,
        sizes: dict[str, int] | None = None,
        source: str = "mate1",
        path: str | Path | None = None,
        retries: int = 2,
        encoding: str = "auto",
        goal: str = "mate",
        strict: bool = False,
        allow_short: bool = False,
    ):
        unknown = set(sizes or {}) - set(SPLITS)
        if unknown:
            raise ValueError(f"unknown chess splits {sorted(unknown)}; expected {list(SPLITS)}")
        if source not in SOURCES:
            raise ValueError(f"unknown chess source {source!r}; expected one of {list(SOURCES)}")
        if (path is None) != (source == "mate1"):
            raise ValueError(f"chess source {source!r} {'takes no' if source == 'mate1' else 'needs a'} path")
        if path is not None and not Path(path).is_file():
            raise ValueError(f"chess puzzle file not found: {path}")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"chess retries must be an integer >= 0, got {retries!r}")
        if goal not in GOALS:
            raise ValueError(f"chess goal must be one of {list(GOALS)}, got {goal!r}")
        self.encoding, self.goal, self.strict, self.allow_short = (
            encoding,
            goal,
            bool(strict),
            bool(allow_short),
        )
        self.seed = seed
        self.sizes = {**DEFAULT_SIZES, **(sizes or {})}
        self.source = source
        self.path = path
        self.retries = retries
        self.brief = BRIEF.replace("{retries}", str(retries))
        self.cached: dict[str, list[Task]] | None = None

    def splits(self) -> dict[str, list[Task]]:
        if self.cached is None:
            puzzles = self.generated() if self.source == "mate1" else self.loaded()
            self.cached = {
                split: [to_task(p, f"chess-{split}-{i}") for i, p in enumerate(puzzles[split])]
                for split in SPLITS
            }
        return self.cached

    def generated(self) -> dict[str, list[Puzzle]]:
        seen: set[str] = set()
        out: dict[str, list[Puzzle]] = {}
        for split in ("test", "val", "search", "train"):
            out[split] = generate_mate_in_one(f"chess:{self.seed}:{split}", self.sizes[split], seen)
            seen.update(position_key(p.fen) for p in out[split])
        return out

    def loaded(self) -> dict[str, list[Puzzle]]:
        """The file's puzzles dealt to the splits; a one-line summary of what was loaded and skipped goes
        to stderr (with the first skips), and `strict` makes any skip an error."""
        load = load_lichess_csv if self.source == "lichess" else load_pgn_puzzles
        result = load(self.path, self.encoding, self.goal)
        if result.skipped and self.strict:
            raise ValueError(f"{result.skipped[0]} (strict: every puzzle must load; {result.summary()})")
        unique: dict[str, Puzzle] = {}
        for puzzle in result.puzzles:
            unique.setdefault(position_key(puzzle.fen), puzzle)
        duplicates = len(result.puzzles) - len(unique)
        note = f"; {duplicates} repeated positions dropped" if duplicates else ""
        print(f"whale: {self.path} ({result.encoding}): puzzles {result.summary()}{note}", file=sys.stderr)
        for line in result.skipped[:SKIPS_SHOWN]:
            print(f"  skipped {line}", file=sys.stderr)
        if len(result.skipped) > SKIPS_SHOWN:
            print(f"  ... and {len(result.skipped) - SKIPS_SHOWN} more", file=sys.stderr)

        def rank(key: str) -> str:
            return hashlib.sha256(f"{self.seed}:{key}".encode()).hexdigest()

        ordered = [unique[k] for k in sorted(unique, key=rank)]
        need = sum(self.sizes[s] for s in ("test", "val", "search"))
        if len(ordered) < need:
            raise ValueError(
                f"{self.path}: {len(ordered)} distinct puzzles, but test, val and search need {need}"
            )
        out: dict[str, list[Puzzle]] = {}
        start = 0
        for split in ("test", "val", "search", "train"):
            out[split] = ordered[start : start + self.sizes[split]]
            start += self.sizes[split]
        if len(out["train"]) < self.sizes["train"]:
            short = f"train gets {len(out['train'])} of the {self.sizes['train']} puzzles asked for"
            if not self.allow_short:
                raise ValueError(
                    f"{self.path}: {short} (set the chess option allow_short: true to run anyway)"
                )
            print(f"whale: {self.path}: {short} (allow_short)", file=sys.stderr)
        used = ", ".join(f"{split} {len(out[split])}" for split in ("train", "search", "val", "test"))
        print(f"whale: {self.path}: splits used: {used}", file=sys.stderr)
        return out

    def seed_harness(self) -> str:
        return (Path(__file__).parent / "harnesses" / "chess_seed.py").read_text(encoding="utf-8")

    def toolbox(self, task: Task) -> ChessToolbox:
        return ChessToolbox(task.inputs["fen"], (task.gold or {}).get("line"), self.retries)

    def verify(self, task: Task, answer: str | None, toolbox: Any) -> float:
        """1.0 when the rollout's toolbox solved the puzzle. When the harness never called play, its answer
        is played as the first move on a fresh board (enough for a mate in 1)."""
        box = toolbox if isinstance(toolbox, ChessToolbox) else None
        if box is not None and box.status == "solved":
            return 1.0
        if (box is None or box.play_calls == 0) and isinstance(answer, str):
            for candidate in answer_candidates(answer):
                fresh = ChessToolbox(task.inputs["fen"], task.gold["line"], retries=1)
                try:
                    fresh.play(candidate)
                except ToolError:
                    continue
                return 1.0 if fresh.status == "solved" else 0.0
        return 0.0

    def knob_pool(self) -> dict[str, list[Any]]:
        return {knob: list(values) for knob, values in KNOB_POOL.items()}
