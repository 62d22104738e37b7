"""Every built-in domain and a user's one-file domain run through the real CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import chess
import pytest
from test_cli import ENV, assert_user_error, check_complete_run, cold_whale, whale

from whale.core.files import read_jsonl
from whale.core.stats import task_means
from whale.deploy.agent import load_agent, task_from_inputs
from whale.deploy.bundle import export_bundle
from whale.deploy.versions import agent_versions
from whale.domains.chess_puzzles import generate_mate_in_one

pytestmark = pytest.mark.slow
REVERSE = Path(__file__).resolve().parents[1] / "fixtures" / "reverse_domain.py"


@pytest.mark.parametrize("domain", ["chess", "searchqa"])
def test_tiny_run_on_each_builtin_domain(tmp_path, domain):
    out = tmp_path / domain
    proc = whale("run", "--preset", "tiny", "--set", f"domain={domain}", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_complete_run(out)
    rollout = read_jsonl(out / "rollouts/train.jsonl")[0]
    assert rollout["task_id"].startswith(domain)
    assert read_jsonl(out / "events.jsonl")[0]["config"]["domain"]["name"] == domain


def test_a_chess_bundle_from_a_puzzle_file_moves_and_plays_a_new_position(tmp_path):
    """The puzzle file travels inside the bundle (no absolute path to it), and the toolbox plays a FEN
    that is in no file: a new position needs no stored solution line."""
    pgn = tmp_path / "puzzles.pgn"
    games = []
    for puzzle in generate_mate_in_one("bundle-file", 30):
        mate = chess.Board(puzzle.fen).variation_san([chess.Move.from_uci(puzzle.line[0])])
        games.append(f'[FEN "{puzzle.fen}"]\n\n{mate} *\n')
    pgn.write_text("\n".join(games), encoding="utf-8")
    out = tmp_path / "run"
    sizes = "domain.sizes={train: 12, search: 6, val: 6, test: 6}"
    proc = whale("run", "--preset", "tiny", "--set", "domain=chess", "--set", "domain.options.source=pgn",
                 "--set", f"domain.options.path={pgn}", "--set", sizes, "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "puzzles loaded 30, skipped 0" in proc.stderr and "splits used: train 12" in proc.stderr
    export_bundle(out, agent_versions(out)[-1], tmp_path / "bundle")
    moved = tmp_path / "elsewhere" / "bundle"
    moved.parent.mkdir()
    shutil.move(tmp_path / "bundle", moved)
    pgn.unlink()
    assert str(pgn) not in (moved / "domain.json").read_text() and (moved / "data" / "path.pgn").is_file()
    (new,) = generate_mate_in_one("a position in no file", 1)
    inputs = {"fen": new.fen, "side": "white" if chess.Board(new.fen).turn else "black"}
    with load_agent(moved) as agent:
        answer = agent(inputs)
        box = agent.domain.toolbox(task_from_inputs(inputs))
    assert answer.error is None and answer.reward is None, answer.error
    mate = chess.Board(new.fen).san(chess.Move.from_uci(new.line[0]))
    assert box.play(mate)["result"] == "solved"  # the tools know mate without a stored line


def test_user_domain_file_runs_and_bad_files_are_one_line_errors(tmp_path, capsys):
    out = tmp_path / "reverse"
    proc = whale("run", "--preset", "tiny", "--domain-file", str(REVERSE), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_complete_run(out)
    assert read_jsonl(out / "rollouts/train.jsonl")[0]["task_id"].startswith("rev-train-")

    bundle = tmp_path / "bundle"  # the domain file travels with the bundle, and loading it says so
    export_bundle(out, agent_versions(out)[-1], bundle)
    capsys.readouterr()
    with load_agent(bundle) as agent:
        answer = agent(agent.domain_task(read_jsonl(out / "rollouts/train.jsonl")[0]["task_id"]))
    assert answer.error is None
    warning = f"whale: warning: {bundle / 'domain.py'} is a domain file: it runs in this process, unsandboxed"
    assert capsys.readouterr().err.startswith(warning)

    assert_user_error(
        whale("run", "--preset", "tiny", "--domain-file", str(tmp_path / "nope.py")), "not found"
    )
    broken = tmp_path / "broken.py"
    broken.write_text("def make_domain(seed, sizes):\n    return object()\n")
    assert_user_error(whale("run", "--preset", "tiny", "--domain-file", str(broken)), "missing splits")


def test_domains_eval_and_harness_check_commands(tmp_path):
    listing = whale("domains", "--domain-file", str(REVERSE))
    assert listing.returncode == 0, listing.stderr[-2000:]
    for name in ("math", "chess", "searchqa", "qa", "reasoning-gym", "reverse_domain"):
        assert name in listing.stdout
    assert "Reverse a word" in listing.stdout  # the user's file was built, not just named

    harness = tmp_path / "h.py"
    harness.write_text(
        "def run(task, llm, tools):\n    return llm.chat([{'role': 'user', 'content': 'hi'}])\n"
    )
    scored = whale("eval", "--harness", str(harness), "--preset", "tiny", "--k", "2", "--split", "val",
                   "--show-traces", "1")  # fmt: skip
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert "mean@2" in scored.stdout and "pass@2" in scored.stdout and "rollouts" in scored.stdout
    assert "math-val-0 sample 0 (h): reward" in scored.stdout and "  model call 0: user: hi" in scored.stdout
    assert scored.stdout.count("    reply: ") == 1  # one rollout shown
    adds = tmp_path / "adds.py"  # no model at all: the sum of the question's first two numbers
    adds.write_text(
        "import re\ndef run(task, llm, tools):\n    a, b = re.findall(r'\\d+', task['question'])[:2]\n"
        "    return tools.calculator(a + ' + ' + b)\n"
    )
    rows = tmp_path / "rows.jsonl"
    paired = whale("eval", "--harness", str(adds), "--against", str(harness), "--preset", "tiny", "--k", "2",
                   "--split", "val", "--rows", str(rows))  # fmt: skip
    assert paired.returncode == 0, paired.stderr[-2000:]
    written = read_jsonl(rows)
    assert len(written) == 2 * 6 * 2 and {r["harness_id"] for r in written} == {"adds", "h"}
    by = {
        h: task_means((r["task_id"], r["reward"]) for r in written if r["harness_id"] == h)
        for h in ("adds", "h")
    }
    diff = sum(by["adds"][t] - by["h"][t] for t in by["h"]) / 6
    assert f"adds.py - h.py: mean@2 {diff:+.3f} [" in paired.stdout.replace("\n", " ")
    assert "paired over 6 tasks" in paired.stdout.replace("\n", " ")
    again = whale("eval", "--harness", str(adds), "--preset", "tiny", "--rows", str(rows))
    assert_user_error(again, "already exists")

    ok = whale("harness", "check", str(harness))
    assert ok.returncode == 0 and "smoke test passed" in ok.stdout, ok.stdout + ok.stderr[-2000:]
    hostile = tmp_path / "hostile.py"
    hostile.write_text("import os\ndef run(task, llm, tools):\n    return os.getcwd()\n")
    bad = whale("harness", "check", str(hostile))
    assert bad.returncode == 1 and "line 1: import of 'os' is not allowed" in bad.stdout
    crashing = tmp_path / "crash.py"
    crashing.write_text("def run(task, llm, tools):\n    return 1 / 0\n")
    crash = whale("harness", "check", str(crashing))
    assert crash.returncode == 1 and "ZeroDivisionError" in crash.stdout


def test_gym_scores_prints_the_seed_score_per_dataset_and_refuses_unsupported_ones(tmp_path):
    pytest.importorskip("reasoning_gym")
    out = tmp_path / "scores.json"
    proc = whale("gym-scores", "--preset", "tiny", "--datasets", "basic_arithmetic,boxnet", "--k", "1",
                 "--tasks", "2", "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line.split("│")[1].strip(): line for line in proc.stdout.splitlines() if line.count("│") >= 5}
    assert "mean@1" not in rows and "[" in rows["basic_arithmetic"] and "refused: " in rows["boxnet"]
    assert any(line.startswith("basic_arithmetic: ") for line in proc.stdout.splitlines())  # as it goes
    saved = json.loads(out.read_text())
    scored = saved["datasets"]["basic_arithmetic"]
    assert (saved["tasks"], saved["k"]) == (2, 1) and 0.0 <= scored["mean"] <= 1.0 and scored["commit"]
    assert (
        set(saved["datasets"]) == {"basic_arithmetic", "boxnet"} and "refused" in saved["datasets"]["boxnet"]
    )
    again = whale("gym-scores", "--preset", "tiny", "--datasets", "basic_arithmetic,chain_sum", "--k", "1",
                  "--tasks", "2", "--out", str(out))  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    lines = again.stdout.splitlines()
    assert not any(line.startswith("basic_arithmetic: ") for line in lines)  # kept from the first call
    assert any(line.startswith("chain_sum: ") for line in lines)
    assert json.loads(out.read_text())["datasets"]["basic_arithmetic"] == scored
    other = tmp_path / "other.json"
    other.write_text('{"runs": []}')
    refused = whale("gym-scores", "--preset", "tiny", "--datasets", "chain_sum", "--out", str(other))
    assert_user_error(refused, f"--out {other}: not a gym-scores file")
    assert other.read_text() == '{"runs": []}'


def test_gym_scores_without_reasoning_gym_says_how_to_install_it(tmp_path):
    """A missing extra is one line, as for `whale run --set domain=reasoning-gym`, not a traceback."""
    (tmp_path / "reasoning_gym.py").write_text("raise ImportError('No module named reasoning_gym')\n")
    path = ":".join(p for p in (str(tmp_path), ENV.get("PYTHONPATH", "")) if p)
    proc = cold_whale("gym-scores", "--preset", "tiny", env={**ENV, "PYTHONPATH": path})
    assert_user_error(proc, "reasoning-gym is not installed: pip install 'whale[gym]'")


def test_a_reasoning_gym_run_and_its_eval_name_the_dataset(tmp_path):
    pytest.importorskip("reasoning_gym")
    out = tmp_path / "run"
    sets = ["domain=reasoning-gym", "domain.options.dataset=chain_sum", "schedule.budget_rollouts=32"]
    proc = whale("run", "--preset", "tiny", "--out", str(out), *[a for s in sets for a in ("--set", s)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_complete_run(out)
    assert "domain=reasoning-gym/chain_sum" in proc.stdout
    assert "reasoning-gym/chain_sum" in (out / "report.html").read_text()
    seed = tmp_path / "seed.py"
    seed.write_text(whale("harness", "seed", "--domain", "reasoning-gym").stdout)
    options = ["--set", "domain.options.dataset=chain_sum", "--set", "domain.sizes={test: 4}", "--k", "1"]
    scored = whale("eval", "--harness", str(seed), "--domain", "reasoning-gym", "--preset", "tiny", *options)
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert "on reasoning-gym/chain_sum/test" in scored.stdout
