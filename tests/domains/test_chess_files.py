"""Puzzle files as users bring them: cut short, garbled, non-mating, Latin-1, Lichess study exports, and
the real puzzle files Debian's pychess package ships (when they are on this machine). Nothing wrong is
loaded, and every skip names its file, line and reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from whale.domains.chess import ChessDomain
from whale.domains.chess_files import load_pgn_puzzles
from whale.domains.user_files import FileError

# After 1. Qb7+ Kf8 white mates with Qxf7# (or Qh8#): the two-move puzzle of tests/domains/test_chess.py.
PUZZLE_FEN = "8/4kr2/4p3/8/8/8/1QK2R2/Q7 w - - 1 2"
MATE_IN_ONE_FEN = "5k2/1Q3r2/4p3/8/8/8/2K2R2/Q7 w - - 3 3"
GOOD = f'[Event "good"]\n[FEN "{PUZZLE_FEN}"]\n\n1. Qb7+ Kf8 2. Qxf7# *\n\n'
PYCHESS = Path("/usr/share/pychess/learn/puzzles")


def pgn(tmp_path: Path, text: str, name: str = "p.pgn") -> Path:
    path = tmp_path / name
    path.write_text(GOOD + text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("game", "reason"),
    [
        (f'[FEN "{PUZZLE_FEN}"]\n\n1. Qb7+ Kf8 2. Qx', "unreadable move text: text that is not a move: 'Qx'"),
        (f'[FEN "{PUZZLE_FEN}"]\n\n1. Qb7+ Kf8 2. Qz9# *\n', "text that is not a move: 'Qz9#'"),
        (f'[FEN "{PUZZLE_FEN}"]\n\n1. Qb7+ Kf8 2. Qxf7#\n', "the game ends without a result"),
        (f'[FEN "{PUZZLE_FEN}"]\n\n1. Qb7+ Kf8 2. Qc8+ *\n', "no checkmate: the goal is 'mate'"),
        (
            f'[Termination "mate in 2"]\n[FEN "{MATE_IN_ONE_FEN}"]\n\n1. Qxf7# *\n',
            "wrong length: the goal is 'mate in 2'; the line mates in 1",
        ),
        (f'[FEN "{PUZZLE_FEN}"]\n\n1. Qb7+ Kf8 *\n', "must end with the solver's move"),
    ],
)
def test_a_cut_garbled_or_non_mating_game_is_skipped_with_its_line(tmp_path, game, reason):
    path = pgn(tmp_path, game)
    loaded = load_pgn_puzzles(path)
    assert [p.fen for p in loaded.puzzles] == [PUZZLE_FEN]  # the good game before it still loads
    assert len(loaded.skipped) == 1 and loaded.skipped[0].startswith(f"{path}:6: ")
    assert reason in loaded.skipped[0] and "\n" not in loaded.skipped[0]


def test_latin1_files_are_detected_and_a_wrong_encoding_names_the_line(tmp_path):
    path = tmp_path / "latin1.pgn"
    path.write_bytes(
        (GOOD + f'[White "R\xe9ti"]\n[FEN "{MATE_IN_ONE_FEN}"]\n\n1. Qxf7# *\n').encode("latin-1")
    )
    loaded = load_pgn_puzzles(path)
    assert loaded.encoding == "cp1252" and len(loaded.puzzles) == 2 and loaded.skipped == []
    with pytest.raises(FileError, match=rf"^{path}:6: not UTF-8 text \(set the chess option encoding"):
        load_pgn_puzzles(path, encoding="utf-8")
    assert len(load_pgn_puzzles(path, encoding="latin-1").puzzles) == 2


STUDY = f"""[Event "Practice: Mates: Introduction"]
[Site "https://lichess.org/study/abcd"]
[Result "*"]

{{ Welcome. Each chapter is a position to finish. }}
 *

[Event "Practice: Mates: #1"]
[Termination "mate in 1"]
[FEN "{MATE_IN_ONE_FEN}"]
[SetUp "1"]

{{ [%csl Gf7] Find the mate. }}
 *

[Event "Practice: Mates: #2"]
[Termination "mate in 2"]
[FEN "{PUZZLE_FEN}"]
[SetUp "1"]

{{ A main line with a side variation and arrows. }}
1. Qb7+ (1. Qh8? Rf8) 1... Kf8 2. Qxf7# {{ [%cal Gb7f7] }} *

[Event "Practice: Material: #1"]
[Termination "+300cp in 2"]
[FEN "{PUZZLE_FEN}"]
[SetUp "1"]

1. Qb7+ Kf8 2. Qxf7# *
"""


def test_lichess_study_chapters_load_and_the_rest_is_summarised(tmp_path, capsys):
    path = tmp_path / "study.pgn"
    path.write_text(STUDY, encoding="utf-8")
    loaded = load_pgn_puzzles(path)
    assert loaded.summary() == "loaded 2, skipped 2 (no [FEN] tag 1, goal not a mate 1)"
    mate_in_one, two_moves = loaded.puzzles
    assert mate_in_one.fen == MATE_IN_ONE_FEN and "b7f7" in mate_in_one.mates  # any mate solves it
    assert two_moves.line == ("b2b7", "e7f8", "b7f7")  # the main line, not the variation
    assert len(load_pgn_puzzles(path, goal="line").puzzles) == 3  # the +300cp line taken as given

    sizes = {"train": 0, "search": 0, "val": 0, "test": 2}
    domain = ChessDomain(source="pgn", path=path, sizes=sizes)
    box = domain.toolbox(next(t for t in domain.splits()["test"] if t.inputs["fen"] == MATE_IN_ONE_FEN))
    assert box.play("Qh8")["result"] == "solved"  # another mate than the one stored
    err = capsys.readouterr().err.splitlines()
    assert (
        err[0]
        == f"whale: {path} (utf-8-sig): puzzles loaded 2, skipped 2 (no [FEN] tag 1, goal not a mate 1)"
    )
    assert err[1] == f"  skipped {path}:1: no [FEN] tag: the game has no puzzle position"
    with pytest.raises(ValueError, match=rf"^{path}:1: no \[FEN\] tag.*\(strict: every puzzle must load"):
        ChessDomain(source="pgn", path=path, sizes=sizes, strict=True).splits()


@pytest.mark.skipif(not PYCHESS.is_dir(), reason="Debian's pychess puzzle files are not installed")
def test_the_pychess_puzzle_files_load():
    """The mate-in-N files (one of them Latin-1) load whole; of the Lichess practice studies beside
    them, the chapters with a main line or a stated mate in 1 load, and the rest is skipped with reasons."""
    counts = {}
    for name in ("mate_in_2.pgn", "mate_in_3.pgn", "mate_in_4.pgn"):
        loaded = load_pgn_puzzles(PYCHESS / name)
        counts[name] = (len(loaded.puzzles), len(loaded.skipped), loaded.encoding)
    assert counts == {
        "mate_in_2.pgn": (166, 0, "cp1252"),
        "mate_in_3.pgn": (375, 0, "utf-8-sig"),
        "mate_in_4.pgn": (373, 0, "utf-8-sig"),
    }
    studies = [load_pgn_puzzles(path) for path in sorted(PYCHESS.glob("lichess_study_*.pgn"))]
    assert sum(len(s.puzzles) for s in studies) > 0 and sum(len(s.skipped) for s in studies) > 0
    assert all(line.split(": ", 1)[0].rsplit(":", 1)[1].isdigit() for s in studies for line in s.skipped)
