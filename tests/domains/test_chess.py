import json
from pathlib import Path

import chess
import pytest

from whale.domains.chess import ChessDomain, ChessToolbox
from whale.domains.chess_files import load_lichess_csv, load_pgn_puzzles
from whale.domains.chess_puzzles import generate_mate_in_one, mating_moves, position_key
from whale.harness.calls import RolloutJob, RunnerLimits
from whale.harness.records import HarnessCandidate
from whale.harness.runner import RolloutRunner
from whale.harness.task import Task, ToolError
from whale.harness.validate import problems
from whale.model.engine import Generation, GenerationRequest, SamplingParams
from whale.search.mutation import find_knobs, set_knobs

SMALL = {"train": 40, "search": 8, "val": 8, "test": 16}
HEADER = "PuzzleId,FEN,Moves,Rating,RatingDeviation,Popularity,NbPlays,Themes,GameUrl,OpeningTags"
# A real two-move puzzle: black plays ...Rf7 (the opening move), then white mates with Qb7+ Kf8 Qxf7#;
# in the final position Qh8# also mates.
PRE_FEN = "8/4k3/4p3/8/8/5r2/1QK2R2/Q7 b - - 0 1"
PUZZLE_FEN = "8/4kr2/4p3/8/8/8/1QK2R2/Q7 w - - 1 2"
LINE = ["b2b7", "e7f8", "b7f7"]
ROW = f"t0001,{PRE_FEN},f3f7 {' '.join(LINE)},1500,80,90,100,mateIn2 short,https://lichess.org/x,"
SETUP_TAG = '[SetUp "1"]\n'


def write_csv(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "puzzles.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return path


def lichess_task(tmp_path: Path) -> tuple[ChessDomain, Task]:
    sizes = {"train": 0, "search": 0, "val": 0, "test": 1}
    domain = ChessDomain(source="lichess", path=write_csv(tmp_path, ROW), sizes=sizes)
    (task,) = domain.splits()["test"]
    return domain, task


def non_mating_move(board: chess.Board) -> chess.Move:
    for move in board.legal_moves:
        board.push(move)
        mate = board.is_checkmate()
        board.pop()
        if not mate:
            return move
    raise AssertionError("no non-mating move")


def test_the_constructed_lichess_puzzle_is_what_the_tests_assume():
    board = chess.Board(PRE_FEN)
    board.push_uci("f3f7")
    assert board.fen() == PUZZLE_FEN and board.turn == chess.WHITE
    assert non_mating_move(board) and not mating_moves(board)[0]  # a real two-mover, no mate in one
    for uci in LINE:
        board.push_uci(uci)
    assert board.is_checkmate()
    board.pop()
    board.push_uci("a1h8")
    assert board.is_checkmate()


def test_generated_puzzles_have_a_mate_and_score_through_the_toolbox():
    domain = ChessDomain()
    puzzles = generate_mate_in_one("check", 300)
    for puzzle in puzzles:
        board = chess.Board(puzzle.fen)
        assert board.is_valid() and not board.is_game_over()
        mates = []
        for move in board.legal_moves:
            board.push(move)
            if board.is_checkmate():
                mates.append(move.uci())
            board.pop()
        assert sorted(mates) == list(puzzle.mates) and puzzle.line == (puzzle.mates[0],)
        assert board.legal_moves.count() > len(mates)
        side = "white" if board.turn == chess.WHITE else "black"
        task = Task("t", {"fen": puzzle.fen, "side": side}, {"line": list(puzzle.line)})
        wrong = domain.toolbox(task)
        result = wrong.play(board.san(non_mating_move(board)))
        assert result["result"] == "wrong" and not result["ok"]
        assert domain.verify(task, result["move"], wrong) == 0.0
        for mate in puzzle.mates:  # every mate solves, in either notation
            for notation in (mate, board.san(chess.Move.from_uci(mate))):
                box = domain.toolbox(task)
                assert box.play(notation)["result"] == "solved"
                assert domain.verify(task, notation, box) == 1.0
    sides = {chess.Board(p.fen).turn for p in puzzles}
    assert sides == {chess.WHITE, chess.BLACK}


def test_generator_makes_a_thousand_distinct_positions_deterministically():
    puzzles = generate_mate_in_one(7, 1000)
    assert len({position_key(p.fen) for p in puzzles}) == 1000
    assert generate_mate_in_one(7, 20) == puzzles[:20]
    assert generate_mate_in_one(8, 20) != puzzles[:20]


def test_splits_are_disjoint_deterministic_and_hold_only_visible_inputs():
    splits = ChessDomain(seed=0, sizes=SMALL).splits()
    assert {s: len(t) for s, t in splits.items()} == SMALL
    keys = [position_key(t.inputs["fen"]) for tasks in splits.values() for t in tasks]
    assert len(set(keys)) == len(keys)
    assert ChessDomain(seed=0, sizes=SMALL).splits() == splits
    assert ChessDomain(seed=1, sizes=SMALL).splits()["test"] != splits["test"]
    bigger = ChessDomain(seed=0, sizes={**SMALL, "train": 80}).splits()
    assert all(bigger[s] == splits[s] for s in ("test", "val", "search"))
    for task in (t for tasks in splits.values() for t in tasks):
        assert set(task.inputs) == {"fen", "side"}
        assert task.inputs["side"] == ("white" if chess.Board(task.inputs["fen"]).turn else "black")
        assert task.gold["line"][0] in task.gold["mates"]


def test_loaded_splits_are_dealt_by_position_hash(tmp_path, capsys):
    games = []
    for puzzle in generate_mate_in_one("pgn", 20):
        moves = chess.Board(puzzle.fen).variation_san([chess.Move.from_uci(puzzle.line[0])])
        games.append(f'[FEN "{puzzle.fen}"]\n\n{moves} *\n')
    path = tmp_path / "p.pgn"
    path.write_text("\n".join(games + games[:3]), encoding="utf-8")  # three duplicate positions
    sizes = {"train": 100, "search": 2, "val": 3, "test": 4}
    with pytest.raises(ValueError, match="train gets 11 of the 100 puzzles asked for .*allow_short"):
        ChessDomain(source="pgn", path=path, sizes=sizes).splits()  # a short split is never silent
    splits = ChessDomain(source="pgn", path=path, sizes=sizes, allow_short=True).splits()
    assert {s: len(t) for s, t in splits.items()} == {"train": 11, "search": 2, "val": 3, "test": 4}
    err = capsys.readouterr().err
    assert "loaded 23, skipped 0; 3 repeated positions dropped" in err
    assert "splits used: train 11, search 2, val 3, test 4" in err
    keys = [position_key(t.inputs["fen"]) for tasks in splits.values() for t in tasks]
    assert len(set(keys)) == 20
    assert ChessDomain(source="pgn", path=path, sizes=sizes, allow_short=True).splits() == splits
    again = ChessDomain(source="pgn", path=path, sizes=sizes, seed=1, allow_short=True).splits()
    assert again["test"] != splits["test"]
    with pytest.raises(ValueError, match="20 distinct puzzles"):
        ChessDomain(source="pgn", path=path, sizes={"test": 30}).splits()


def test_lichess_line_scores_only_when_fully_played(tmp_path):
    domain, task = lichess_task(tmp_path)
    assert task.inputs == {"fen": PUZZLE_FEN, "side": "white"}
    assert task.gold["line"] == LINE and task.meta["rating"] == 1500

    box = domain.toolbox(task)
    first = box.play("Qb7+")
    after = "5k2/1Q3r2/4p3/8/8/8/2K2R2/Q7 w - - 3 3"
    expected = {"ok": True, "result": "correct", "move": "Qb7+", "opponent_reply": "Kf8", "fen": after}
    assert first == {**expected, "message": first["message"]} and "Kf8" in first["message"]
    assert domain.verify(task, "Qb7+", box) == 0.0  # stopped halfway
    assert box.play("b7f7")["result"] == "solved"
    assert domain.verify(task, "Qxf7#", box) == 1.0

    wrong_first = domain.toolbox(task)
    assert wrong_first.play("Kd3")["result"] == "wrong"
    assert domain.verify(task, "Kd3", wrong_first) == 0.0
    wrong_second = domain.toolbox(task)
    wrong_second.play("Qb7")
    assert wrong_second.play("Kd3")["result"] == "wrong"
    again = wrong_second.play("Qxf7")  # the puzzle is over: nothing is played
    assert again["result"] == "wrong" and not again["ok"]
    assert domain.verify(task, "Qxf7", wrong_second) == 0.0


def test_alternative_mate_is_accepted(tmp_path):
    domain, task = lichess_task(tmp_path)
    box = domain.toolbox(task)
    box.play("Qb7")
    result = box.play("Qh8#")
    assert result["result"] == "solved" and result["move"] == "Qh8#"
    assert domain.verify(task, None, box) == 1.0


def test_verify_plays_a_returned_answer_when_the_harness_never_played(tmp_path):
    domain = ChessDomain(sizes={"train": 1, "search": 1, "val": 1, "test": 1})
    task = domain.splits()["test"][0]
    board = chess.Board(task.inputs["fen"])
    mate = board.san(chess.Move.from_uci(task.gold["line"][0]))
    fresh = domain.toolbox
    assert domain.verify(task, mate, fresh(task)) == 1.0
    assert domain.verify(task, f"The best move is {mate}.", fresh(task)) == 1.0
    assert domain.verify(task, task.gold["line"][0], fresh(task)) == 1.0
    assert domain.verify(task, board.san(non_mating_move(board)), fresh(task)) == 0.0
    assert domain.verify(task, "no idea", fresh(task)) == 0.0
    assert domain.verify(task, None, fresh(task)) == 0.0
    played = fresh(task)
    with pytest.raises(ToolError):
        played.call("play", ["Zz9"], {})
    assert domain.verify(task, mate, played) == 0.0  # it called play: only the toolbox counts
    _, lichess = lichess_task(tmp_path)
    assert domain.verify(lichess, "Qb7+", domain.toolbox(lichess)) == 0.0  # one move of two


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("t2,8/8/8/8/8/8/8/8 w - - 0 1,e2e4 e7e5", "wrong column count"),
        ("t2,not a fen,f3f7 b2b7,1,1,1,1,,,", "invalid FEN"),
        (f"t2,{PRE_FEN},f3f7 c2c8,1,1,1,1,,,", "solution move 1 'c2c8' is illegal"),
        (f"t2,{PRE_FEN},e2e4 b2b7,1,1,1,1,,,", "first move 'e2e4'"),
        (f"t2,{PRE_FEN},f3f7 b2b7 e7f8,1,1,1,1,,,", "must end with the solver's move"),
        (f"t2,{PRE_FEN},f3f7,1,1,1,1,,,", "needs the opponent's move"),
        (f"t2,{PRE_FEN},f3f7 b2b7,high,1,1,1,,,", "Rating 'high'"),
    ],
)
def test_malformed_lichess_rows_are_skipped_naming_path_and_line(tmp_path, row, reason):
    loaded = load_lichess_csv(write_csv(tmp_path, ROW, row))
    assert len(loaded.puzzles) == 1 and len(loaded.skipped) == 1  # the good row stays
    message = loaded.skipped[0]
    assert message.startswith(f"{tmp_path / 'puzzles.csv'}:3: ") and reason in message and "\n" not in message


def test_lichess_loader_reads_the_puzzle(tmp_path):
    (puzzle,) = load_lichess_csv(write_csv(tmp_path, ROW, "")).puzzles
    assert puzzle.fen == PUZZLE_FEN and puzzle.line == tuple(LINE)
    assert puzzle.meta["puzzle_id"] == "t0001" and puzzle.meta["themes"] == ["mateIn2", "short"]


def test_pgn_loader_uses_the_fen_tag_and_mainline(tmp_path):
    path = tmp_path / "puzzles.pgn"
    path.write_text(
        f'[Event "p1"]\n[FEN "{PUZZLE_FEN}"]\n{SETUP_TAG}\n1. Qb7+ Kf8 2. Qxf7# *\n\n'
        f'[Event "p2"]\n[FEN "{PRE_FEN}"]\n{SETUP_TAG}\n1... Rf7 *\n',
        encoding="utf-8",
    )
    loaded = load_pgn_puzzles(path)  # goal "mate": p2's line does not mate
    assert [p.fen for p in loaded.puzzles] == [
        PUZZLE_FEN
    ] and loaded.summary() == "loaded 1, skipped 1 (no checkmate 1)"
    puzzles = load_pgn_puzzles(path, goal="line").puzzles
    assert [p.fen for p in puzzles] == [PUZZLE_FEN, PRE_FEN]
    assert puzzles[0].line == tuple(LINE) and puzzles[1].line == ("f3f7",)
    sizes = {"train": 0, "search": 0, "val": 0, "test": 2}
    domain = ChessDomain(source="pgn", path=path, sizes=sizes, goal="line")
    task = next(t for t in domain.splits()["test"] if t.inputs["fen"] == PUZZLE_FEN)
    box = domain.toolbox(task)
    assert [box.play(m)["result"] for m in ("Qb7", "Qxf7")] == ["correct", "solved"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('[Event "x"]\n\n1. e4 e5 *\n', "no [FEN] tag"),
        (f'[Event "x"]\n[FEN "{PUZZLE_FEN}"]\n\n1. Qb7+ Kf8 *\n', "must end with the solver's move"),
        (f'[Event "x"]\n[FEN "{PUZZLE_FEN}"]\n\n1. Kf8 *\n', "illegal san"),
    ],
)
def test_malformed_pgn_is_skipped_naming_path_and_line(tmp_path, text, reason):
    path = tmp_path / "bad.pgn"
    path.write_text(
        f'[Event "ok"]\n[FEN "{PUZZLE_FEN}"]\n\n1. Qb7+ Kf8 2. Qxf7# *\n\n{text}', encoding="utf-8"
    )
    loaded = load_pgn_puzzles(path)
    assert len(loaded.puzzles) == 1 and len(loaded.skipped) == 1
    assert loaded.skipped[0].startswith(f"{path}:6: ") and reason in loaded.skipped[0]


def test_illegal_and_malformed_moves_raise_and_use_up_retries(tmp_path):
    domain, task = lichess_task(tmp_path)
    box = domain.toolbox(task)  # the default budget: two mistakes, the third fails the puzzle
    with pytest.raises(ToolError, match=r"malformed move 'hello there'.*1 retry left"):
        box.call("play", ["hello there"], {})
    with pytest.raises(ToolError, match=r"illegal move 'Kf8'.*0 retries left"):
        box.call("play", [], {"move": "Kf8"})
    assert box.status == "playing"
    assert box.call("play", ["Qb7+"], {})["result"] == "correct"  # mistakes do not end the puzzle
    with pytest.raises(ToolError, match="no retries left, the puzzle is failed"):
        box.call("play", ["e2e4"], {})
    assert box.status == "failed"
    with pytest.raises(ToolError, match="no retries left"):
        box.call("play", ["Qxf7#"], {})
    assert domain.verify(task, "Qxf7#", box) == 0.0

    sizes = {"train": 0, "search": 0, "val": 0, "test": 1}
    strict = ChessDomain(source="lichess", path=write_csv(tmp_path, ROW), retries=0, sizes=sizes)
    box = strict.toolbox(task)
    with pytest.raises(ToolError, match="no retries left"):
        box.play(None)
    assert box.status == "failed"
    with pytest.raises(ToolError, match="no retries left"):
        box.play("Qb7")


def test_argument_errors_are_tool_errors_but_cost_no_retry(tmp_path):
    domain, task = lichess_task(tmp_path)
    box = domain.toolbox(task)
    for name, args in (("play", []), ("play", ["Qb7", "Kf8"]), ("board", [1]), ("nope", [])):
        with pytest.raises(ToolError):
            box.call(name, args, {})
    assert box.retries_left == 2


def test_tool_results_are_json_and_describe_the_position(tmp_path):
    domain, task = lichess_task(tmp_path)
    box = domain.toolbox(task)
    results = [box.call(name, [], {}) for name in ("board", "side_to_move", "legal_moves")]
    results.append(box.call("play", ["b2b7"], {}))
    results.append(box.call("board", [], {}))
    assert json.loads(json.dumps(results)) == results
    diagram, side, legal, played, after = results
    assert str(chess.Board(PUZZLE_FEN)).splitlines()[1] in diagram and PUZZLE_FEN in diagram
    assert side == "white"
    board = chess.Board(PUZZLE_FEN)
    assert sorted(legal["uci"]) == sorted(m.uci() for m in board.legal_moves)
    assert [board.parse_san(s).uci() for s in legal["san"]] == legal["uci"]
    assert "Qb7" in legal["san"] and not any(s.endswith(("+", "#")) for s in legal["san"])
    assert played["fen"] in after and box.side_to_move() == "white"


def test_knob_pool_covers_the_seed_string_knobs():
    domain = ChessDomain(sizes={"train": 1, "search": 1, "val": 1, "test": 1})
    knobs = find_knobs(domain.seed_harness())
    assert {"SHOW_BOARD", "SHOW_LEGAL_MOVES", "RETRIES", "MAX_TOKENS", "N_VOTES"} <= set(knobs)
    strings = {name for name, site in knobs.items() if isinstance(site.value, str)}
    pool = domain.knob_pool()
    assert set(pool) == strings
    for name, values in pool.items():
        assert knobs[name].value in values and len(set(values)) == len(values)
        assert 4 <= len(values) <= 6 or name == "MOVE_FORMAT"
    assert pool["MOVE_FORMAT"] == ["san", "uci"]
    assert "2 such mistakes" in domain.brief


def test_seed_harness_passes_the_validator():
    assert problems(ChessDomain().seed_harness()) == []


# ----- the seed harness in the real sandbox


class ScriptedEngine:
    """Replies from a script: the first entry whose key is in the last user message, else `default`."""

    weights_version = "w0"

    def __init__(self, default: str, by_prompt: dict[str, str] | None = None, queue: list[str] | None = None):
        self.default, self.by_prompt, self.queue = default, by_prompt or {}, list(queue or [])

    def generate(self, requests: list[GenerationRequest], seed: int) -> list[Generation]:
        out = []
        for request in requests:
            prompt = request.messages[-1]["content"]
            text = next((v for k, v in self.by_prompt.items() if k in prompt), None)
            if text is None:
                text = self.queue.pop(0) if self.queue else self.default
            out.append(Generation(text, [1], [2], "eos"))
        return out


def run_seed(domain: ChessDomain, task: Task, engine: ScriptedEngine, knobs: dict | None = None):
    harness = HarnessCandidate("h", set_knobs(domain.seed_harness(), knobs or {}))
    runner = RolloutRunner(engine, domain, SamplingParams(), RunnerLimits(workers=1))
    try:
        (rollout,) = runner.run([RolloutJob(task, harness, 0)])
    finally:
        runner.close()
    assert rollout.error is None
    return rollout


@pytest.fixture(scope="module")
def mate_task() -> tuple[ChessDomain, Task, str, str]:
    domain = ChessDomain(seed=3, sizes={"train": 1, "search": 1, "val": 1, "test": 1})
    task = domain.splits()["val"][0]
    board = chess.Board(task.inputs["fen"])
    mate = board.san(chess.Move.from_uci(task.gold["line"][0]))
    return domain, task, mate, board.san(non_mating_move(board))


def test_seed_harness_solves_a_mate_in_one_in_the_sandbox(mate_task):
    domain, task, mate, _ = mate_task
    rollout = run_seed(domain, task, ScriptedEngine(f"The best move is {mate}."))
    assert rollout.reward == 1.0 and rollout.answer == mate.rstrip("#")
    assert [c.name for c in rollout.tool_calls] == ["play"]
    (call,) = rollout.calls
    prompt = call.messages[-1]["content"]
    assert task.inputs["fen"] in prompt and task.inputs["side"] in prompt and "Legal moves" not in prompt


def test_seed_harness_fails_with_a_wrong_move(mate_task):
    domain, task, _, wrong = mate_task
    rollout = run_seed(domain, task, ScriptedEngine(wrong))
    assert rollout.reward == 0.0 and rollout.tool_calls[0].result["result"] == "wrong"


def test_seed_harness_shows_legal_moves_and_board_when_asked(mate_task):
    domain, task, mate, _ = mate_task
    knobs = {"SHOW_LEGAL_MOVES": True, "SHOW_BOARD": True, "MOVE_FORMAT": "uci"}
    uci = task.gold["line"][0]
    rollout = run_seed(domain, task, ScriptedEngine(uci), knobs)
    assert rollout.reward == 1.0
    prompt = rollout.calls[0].messages[-1]["content"]
    legal = ChessToolbox(task.inputs["fen"], task.gold["line"]).legal_moves()["uci"]
    assert "Legal moves: " + ", ".join(legal) in prompt and "a b c d e f g h" in prompt


def test_seed_harness_retries_after_an_illegal_move(mate_task):
    domain, task, mate, _ = mate_task
    failed = run_seed(domain, task, ScriptedEngine(mate, queue=["Ka9 is illegal, so Qz1"]))
    assert failed.reward == 0.0  # no move in the first reply, RETRIES=0: gives up
    engine = ScriptedEngine(mate, queue=["a1a1", "nothing here"])
    rollout = run_seed(domain, task, engine, {"RETRIES": 2})
    assert rollout.reward == 1.0 and len(rollout.calls) == 3
    feedback = rollout.calls[1].messages[-1]["content"]
    assert "illegal move 'a1a1'" in feedback and "1 retry left" in feedback
    assert "No move found" in rollout.calls[2].messages[-1]["content"]


def test_seed_harness_plays_a_whole_lichess_line_in_the_sandbox(tmp_path):
    domain, task = lichess_task(tmp_path)
    engine = ScriptedEngine("Kd3", {PUZZLE_FEN: "Qb7+", "5k2/1Q3r2": "Qxf7#"})
    rollout = run_seed(domain, task, engine, {"N_VOTES": 3})
    assert rollout.reward == 1.0 and rollout.answer == "Qxf7"
    assert [c.result["result"] for c in rollout.tool_calls] == ["correct", "solved"]
    halfway = run_seed(domain, task, ScriptedEngine("Kd3", {PUZZLE_FEN: "Qb7+"}))
    assert halfway.reward == 0.0 and [c.result["result"] for c in halfway.tool_calls] == ["correct", "wrong"]
