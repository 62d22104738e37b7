"""Property-based tests (hypothesis): config loading and the user-data loaders on arbitrary input.

Every input either loads or fails with a one-line ConfigError/ValueError that names the file (and the
line, where the problem has one); no other exception type, no multi-line or traceback-like message.
"""

from __future__ import annotations

import csv
import io
import json
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import chess
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from whale.core.config import PRESETS, Config, ConfigError, config_from_dict, load_config
from whale.domains.chess_files import LoadedPuzzles, load_lichess_csv, load_pgn_puzzles
from whale.domains.math import load_gsm8k_jsonl
from whale.domains.searchqa.corpus import Document
from whale.domains.searchqa.domain import load_qa_jsonl
from whale.harness.task import Task

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextmanager
def files(**contents: str | bytes) -> Iterator[dict[str, Path]]:
    """Write each name=content into a fresh folder (text as UTF-8; surrogates are not generated)."""
    with tempfile.TemporaryDirectory(prefix="whale-prop-") as folder:
        paths = {}
        for name, content in contents.items():
            path = Path(folder) / name.replace("_", ".")
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8", newline="")
            paths[name] = path
        yield paths


def line_count(path: Path) -> int:
    """An upper bound on the lines of `path`: CSV and PGN also end lines at a lone carriage return."""
    data = path.read_bytes()
    return data.count(b"\n") + data.count(b"\r") + 1


def check_error(exc: BaseException, *paths: Path, kind: type[Exception] = ValueError) -> None:
    """A user-facing error: `kind` (ValueError, or ConfigError for configs), one line, naming a file;
    `path:N:` when it names a line, with N a line the file has."""
    assert isinstance(exc, kind), f"{type(exc).__name__}: {exc}"
    message = str(exc)
    assert message.strip() and "\n" not in message and "\r" not in message, repr(message)
    assert "Traceback" not in message and 'File "' not in message, message
    if paths:
        named = [p for p in paths if message.startswith(str(p))]
        assert named, f"message does not start with a file name: {message!r}"
        m = re.match(re.escape(str(named[0])) + r":(\d+):", message)
        if m:
            assert 1 <= int(m.group(1)) <= line_count(named[0]), message


def outcome(
    fn: Callable[..., Any], *args: Any, paths: tuple[Path, ...] = (), kind: type[Exception] = ValueError
) -> Any:
    """fn(*args), or None after checking that what it raised is a proper user-facing error."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the property is about which exceptions escape
        check_error(exc, *paths, kind=kind)
        return None


# ---- config -------------------------------------------------------------------------------------------

SECTIONS = {
    name: list(field.annotation.model_fields)
    for name, field in Config.model_fields.items()
    if isinstance(field.annotation, type) and hasattr(field.annotation, "model_fields")
}
DOTTED = [f"{s}.{k}" for s, keys in SECTIONS.items() for k in keys] + ["name", "seed", "domain"]
DOTTED += ["schedule.adaptive.patience", "schedule.adaptive.min_weight_steps", "domain.options.levels"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["tiny", "math", "chess", "agent", "whale", "fast-slow", "weights", "1e3", "0x10"]),
)
keys = st.one_of(
    st.sampled_from(sorted({*SECTIONS, *[k for ks in SECTIONS.values() for k in ks], "name", "seed"})),
    st.text(max_size=8),
)
json_like = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)


def config_like() -> st.SearchStrategy[dict[str, Any]]:
    """Mostly real sections and keys with random values, sometimes nonsense."""
    section = st.fixed_dictionaries({}, optional={k: json_like for k in ("k", "lr", "name", "workers")})
    real = st.dictionaries(
        st.sampled_from(sorted(SECTIONS)),
        st.one_of(
            st.dictionaries(
                st.sampled_from(sorted({k for ks in SECTIONS.values() for k in ks})), json_like, max_size=4
            ),  # fmt: skip
            section,
            json_like,
        ),
        max_size=4,
    )
    return st.one_of(real, st.dictionaries(keys, json_like, max_size=5))


def check_config(cfg: Config) -> None:
    """A loaded config survives what a run does with it: written to config.yaml, read back on --resume."""
    assert isinstance(cfg, Config)
    text = yaml.safe_dump(cfg.model_dump(), sort_keys=False)
    again = config_from_dict(yaml.safe_load(text), "config.yaml")
    assert repr(again.model_dump()) == repr(cfg.model_dump())


@SETTINGS
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300), json_like.map(yaml.safe_dump)))
def test_any_config_file_loads_or_fails_in_one_line(content):
    with files(exp_yaml=content) as f:
        cfg = outcome(load_config, None, f["exp_yaml"], paths=(f["exp_yaml"],), kind=ConfigError)
    if cfg is not None:
        check_config(cfg)


@SETTINGS
@given(config_like())
def test_any_yaml_document_loads_or_fails_in_one_line(data):
    with files(exp_yaml=yaml.safe_dump(data)) as f:
        cfg = outcome(load_config, None, f["exp_yaml"], paths=(f["exp_yaml"],), kind=ConfigError)
    if cfg is not None:
        check_config(cfg)


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.one_of(st.sampled_from(DOTTED), st.text(max_size=12)),
            st.one_of(st.text(max_size=20), scalars.map(lambda v: yaml.safe_dump(v).strip())),
            st.sampled_from(["=", "=", " = ", ""]),
        ).map(lambda t: f"{t[0]}{t[2]}{t[1]}"),
        max_size=4,
    )
)
def test_any_set_overrides_load_or_fail_in_one_line(overrides):
    try:
        cfg = load_config("tiny", None, overrides)
    except Exception as exc:  # noqa: BLE001
        check_error(exc, kind=ConfigError)
        message = str(exc)
        assert message.startswith(("--set", str(PRESETS / "tiny.yaml"))), message
        return
    check_config(cfg)


@SETTINGS
@given(config_like())
def test_any_nested_dict_validates_or_fails_in_one_line(data):
    try:
        cfg = config_from_dict(data, "where.yaml")
    except Exception as exc:  # noqa: BLE001
        check_error(exc, kind=ConfigError)
        assert str(exc).startswith("where.yaml: "), str(exc)
        return
    check_config(cfg)


def test_config_edge_cases_are_one_line_errors(tmp_path):
    """Examples hypothesis rarely reaches: deep nesting, huge integers, bad UTF-8, YAML errors in --set."""
    for i, text in enumerate(["[" * 5000, "seed: " + "9" * 5000, "seed: 0x" + "f" * 5000, "{a: " * 3000]):
        path = tmp_path / f"c{i}.yaml"
        path.write_text(text)
        assert outcome(load_config, None, path, paths=(path,), kind=ConfigError) is None
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    assert outcome(load_config, None, path, paths=(path,), kind=ConfigError) is None
    huge = tmp_path / "huge.yaml"
    huge.write_text("model:\n  max_batch: -0x" + "f" * 4000 + "\n")
    assert outcome(load_config, None, huge, paths=(huge,), kind=ConfigError) is None
    for bad in ("rft.k=[", "name=@x", "seed=*alias", "name=!!python/object:os.system ls", "=1", "a..b=1",
                "rft.k=" + "[" * 5000):  # fmt: skip
        try:
            load_config("tiny", None, [bad])
        except Exception as exc:  # noqa: BLE001
            check_error(exc, kind=ConfigError)
            assert str(exc).startswith("--set") or "with --set" in str(exc), str(exc)
        else:
            raise AssertionError(f"{bad!r} was accepted")


# ---- JSONL loaders ------------------------------------------------------------------------------------

answers = st.one_of(
    st.from_regex(r"[a-z ]{0,8}#### ?-?\$?[0-9,]{1,6}", fullmatch=True),
    st.from_regex(r"#### ?[0-9]{4400,4500}", fullmatch=True),
    st.text(max_size=12),
    json_like,
)
gsm8k_rows = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"question": st.one_of(st.text(max_size=20), json_like), "answer": answers},
            optional={"extra": json_like},
        ),
        json_like,
    ),
    max_size=5,
)


def jsonl(rows: list[Any], junk: list[str]) -> str:
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    for i, text in enumerate(junk):
        lines.insert(i % (len(lines) + 1), text)
    return "\n".join(lines) + "\n"


@SETTINGS
@given(
    st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200),
        st.builds(
            jsonl, gsm8k_rows, st.lists(st.sampled_from(["", "  ", "{", "[1]", "\u2028", "\x00"]), max_size=2)
        ),  # fmt: skip
    )
)
def test_gsm8k_loader_returns_tasks_or_a_one_line_error(content):
    with files(gsm8k_jsonl=content) as f:
        tasks = outcome(load_gsm8k_jsonl, f["gsm8k_jsonl"], paths=(f["gsm8k_jsonl"],))
    if tasks is not None:
        assert tasks and all(isinstance(t, Task) for t in tasks)
        for t in tasks:
            assert isinstance(t.inputs["question"], str) and isinstance(t.gold["answer"], int)


def test_gsm8k_rows_may_hold_unicode_line_separators(tmp_path):
    """JSON allows U+2028/U+2029 unescaped inside strings; they must not split a JSONL record."""
    path = tmp_path / "gsm8k.jsonl"
    row = {"question": "two\u2028lines\u2029here", "answer": "so #### 4"}
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    tasks = load_gsm8k_jsonl(path)
    assert [t.inputs["question"] for t in tasks] == [row["question"]] * 2


qa_rows = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"question": st.one_of(st.text(max_size=12), json_like)},
            optional={
                "answer": st.one_of(st.text(max_size=8), json_like),
                "answers": st.one_of(st.lists(st.text(max_size=8), max_size=3), json_like),
                "id": json_like,
                "_id": json_like,
                "hops": json_like,
            },  # fmt: skip
        ),
        json_like,
    ),
    max_size=4,
)
corpus_rows = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"id": st.one_of(st.integers(-5, 5), st.text(max_size=4), json_like)},
            optional={
                "title": st.one_of(st.text(max_size=8), json_like),
                "text": st.one_of(st.text(max_size=12), json_like),
            },  # fmt: skip
        ),
        json_like,
    ),
    max_size=4,
)
junk_lines = st.lists(st.sampled_from(["", "{", "null", "\u2029", "\ufeff{}"]), max_size=2)


@SETTINGS
@given(
    st.one_of(st.binary(max_size=100), st.text(max_size=100), st.builds(jsonl, qa_rows, junk_lines)),
    st.one_of(st.binary(max_size=100), st.text(max_size=100), st.builds(jsonl, corpus_rows, junk_lines)),
)
def test_qa_loader_returns_tasks_and_documents_or_a_one_line_error(questions, corpus):
    with files(questions_jsonl=questions, corpus_jsonl=corpus) as f:
        paths = (f["questions_jsonl"], f["corpus_jsonl"])
        loaded = outcome(load_qa_jsonl, *paths, paths=paths)
    if loaded is not None:
        tasks, documents = loaded
        assert tasks and all(isinstance(t, Task) and t.gold["answers"] for t in tasks)
        assert documents and all(isinstance(d, Document) and isinstance(d.id, str) for d in documents)
        assert len({d.id for d in documents}) == len(documents)


# ---- chess loaders ------------------------------------------------------------------------------------

START = chess.STARTING_FEN
FENS = [
    START,
    "8/4k3/4p3/8/8/5r2/1QK2R2/Q7 b - - 0 1",
    "6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1",
    "7k/8/8/8/8/8/8/K7 w - - 0 1",  # insufficient material: game over
    "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR x KQkq - 0 1",
    "8/8/8/8/8/8/8/8 w - - 0 1",
    "",
]


@st.composite
def line_from(draw: st.DrawFn, fen: str, max_moves: int = 5, san: bool = False) -> list[str]:
    """A random walk of legal moves from `fen` (UCI, or SAN with move numbers), sometimes corrupted."""
    try:
        board = chess.Board(fen)
    except ValueError:
        return draw(st.lists(st.text(max_size=5), max_size=3))
    moves: list[str] = []
    for _ in range(draw(st.integers(0, max_moves))):
        legal = sorted(board.legal_moves, key=lambda m: m.uci())
        if not legal:
            break
        move = legal[draw(st.integers(0, len(legal) - 1))]
        moves.append(board.san(move) if san else move.uci())
        board.push(move)
    if moves and draw(st.integers(0, 4)) == 0:
        moves[draw(st.integers(0, len(moves) - 1))] = draw(
            st.one_of(
                st.sampled_from(["a1a1", "e2e5", "0000", "Kz9", "e9e1", "--", "O-O-O", "e7e8q"]),
                st.text(max_size=5),
            )  # fmt: skip
        )
    return moves


@st.composite
def lichess_rows(draw: st.DrawFn) -> list[list[str]]:
    fen = draw(st.one_of(st.sampled_from(FENS), st.text(max_size=20)))
    moves = " ".join(draw(line_from(fen)))
    rating = draw(st.one_of(st.integers(-100, 3000).map(str), st.sampled_from(["", "²", "١٢", "-"]),
                            st.text(max_size=4)))  # fmt: skip
    themes = draw(st.text(max_size=10))
    return [draw(st.text(max_size=5)), fen, moves, rating, themes]


@st.composite
def lichess_csv(draw: st.DrawFn) -> str:
    columns = ["PuzzleId", "FEN", "Moves", "Rating", "Themes"]
    header = draw(
        st.one_of(
            st.just(columns),
            st.permutations(columns),
            st.lists(st.sampled_from(["PuzzleId", "FEN", "Moves", "X"]), max_size=4),
        )
    )
    index = {"PuzzleId": 0, "FEN": 1, "Moves": 2, "Rating": 3, "Themes": 4, "X": 4}
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for row in draw(st.lists(lichess_rows(), max_size=4)):
        cells = [row[index[name]] for name in header]
        if draw(st.integers(0, 5)) == 0:
            cells = cells[: draw(st.integers(0, len(cells)))]
        writer.writerow(cells)
    text = out.getvalue()
    if draw(st.booleans()):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(['"', "\x00", "\n", "\r", "\ufeff", ",,"])) + text[at:]
    return text


def check_puzzles(loaded: LoadedPuzzles) -> None:
    """Every loaded puzzle replays from its FEN; every skipped one names the file and line."""
    assert isinstance(loaded, LoadedPuzzles) and isinstance(loaded.puzzles, list)
    assert all(re.match(r".+:[0-9]+: ", line) and "\n" not in line for line in loaded.skipped)
    for p in loaded.puzzles:
        board = chess.Board(p.fen)
        assert board.is_valid() and len(p.line) % 2 == 1
        for move in p.line:
            board.push(chess.Move.from_uci(move))


@SETTINGS
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200), lichess_csv()))
def test_lichess_loader_returns_puzzles_or_a_one_line_error(content):
    with files(puzzles_csv=content) as f:
        puzzles = outcome(load_lichess_csv, f["puzzles_csv"], paths=(f["puzzles_csv"],))
    if puzzles is not None:
        check_puzzles(puzzles)


def test_lichess_loader_edge_cases(tmp_path):
    """Bad rows are skipped with their line, never loaded; a file-level fault is a one-line error."""
    header = "PuzzleId,FEN,Moves,Rating\n"
    cases = {
        "same_square": header + f"p1,{START},a1a1 e7e5,1500\n",
        "superscript_rating": header + f"p1,{START},e2e4 e7e5,\u00b2\n",
        "huge_field": header + f'p1,"{"x" * 200_000}",e2e4 e7e5,1500\n',
        "latin1": (header + f"p1,{START},e2e4 e7e5,1500\n").encode() + b"\xe9\n",
        "nul": header + f"p1,{START}\x00,e2e4 e7e5,1500\n",
    }
    for name, content in cases.items():
        path = tmp_path / f"{name}.csv"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        loaded = outcome(load_lichess_csv, path, paths=(path,))
        good = 1 if name == "latin1" else 0  # its first row is fine; the stray byte is a row of its own
        assert loaded is None or (len(loaded.puzzles) == good and len(loaded.skipped) == 1), name


@st.composite
def pgn_game(draw: st.DrawFn) -> str:
    fen = draw(st.one_of(st.sampled_from(FENS), st.text(max_size=12)))
    tags = []
    if draw(st.integers(0, 5)):
        tags.append(f'[FEN "{fen}"]')
    if draw(st.booleans()):
        tags.append('[SetUp "1"]')
    if draw(st.integers(0, 6)) == 0:
        tags.append(f'[Variant "{draw(st.sampled_from(["Atomic", "Crazyhouse", "Chess960", "foo", ""]))}"]')
    if draw(st.booleans()):
        tags.append(f'[Event "{draw(st.text(max_size=6))}"]')
    moves = draw(line_from(fen, san=True))
    numbered = " ".join(f"{i // 2 + 1}. {m}" if i % 2 == 0 else m for i, m in enumerate(moves))
    extra = draw(st.sampled_from(["", " {a comment}", " $1", " (1. e4)", " {unterminated", " )", " 1-0"]))
    return "\n".join(tags) + "\n\n" + numbered + extra + " *\n"


@SETTINGS
@given(
    st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200),
        st.lists(pgn_game(), min_size=1, max_size=3).map("\n".join),
        st.tuples(pgn_game(), st.text(max_size=30)).map("".join),
    )
)
def test_pgn_loader_returns_puzzles_or_a_one_line_error(content):
    with files(puzzles_pgn=content) as f:
        puzzles = outcome(load_pgn_puzzles, f["puzzles_pgn"], paths=(f["puzzles_pgn"],))
    if puzzles is not None:
        check_puzzles(puzzles)


@FEW
@given(st.binary(min_size=1, max_size=64))
def test_pgn_loader_on_bytes_that_are_not_utf8(tail):
    content = f'[FEN "{START}"]\n\n1. e4 *\n'.encode() + b"\xff" + tail
    with files(bad_pgn=content) as f:
        assert outcome(load_pgn_puzzles, f["bad_pgn"], "utf-8", paths=(f["bad_pgn"],)) is None
        check_puzzles(load_pgn_puzzles(f["bad_pgn"]))  # "auto" falls back to a single-byte encoding


def test_pgn_variant_games_are_refused_not_loaded(tmp_path):
    """A [Variant] game's board is not a standard one: its FEN ("...[]" pockets, 960 castling) would break
    the chess toolbox later, so the loader refuses it naming the line."""
    for variant in ("Crazyhouse", "Chess960", "Atomic"):
        path = tmp_path / f"{variant}.pgn"
        path.write_text(f'[FEN "{START}"]\n\n1. e4 *\n\n[Variant "{variant}"]\n[FEN "{START}"]\n\n1. e4 *\n')
        loaded = load_pgn_puzzles(path, goal="line")
        assert len(loaded.puzzles) == 1 and len(loaded.skipped) == 1
        assert re.fullmatch(
            rf".*{variant}\.pgn:5: variant: '{variant}' \(standard chess only\)", loaded.skipped[0]
        )
