"""The real `whale` command line in subprocesses: user errors, a complete tiny run, kill -9 and resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tests.zygote import Zygote
from whale.core.files import jsonl_line_count, read_json, read_jsonl

pytestmark = pytest.mark.slow

LOGS = ("events.jsonl", "evals.jsonl", "rollouts/train.jsonl", "search/evolution_summary.jsonl")
# One torch thread: the tiny model is far faster that way on a small, busy machine.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


_warm: Zygote | None = None


def whale(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m whale.cli <args>` in a process of its own, forked from a warm interpreter that has done
    the imports (tests/zygote.py): the same command, without 7-10 s of start-up each time."""
    global _warm
    if _warm is None:
        _warm = Zygote(ENV)
    with tempfile.TemporaryDirectory() as folder:
        return _warm.run(list(args), Path(folder), timeout)


def cold_whale(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`python -m whale.cli <args>` started from nothing, as a user starts it."""
    return subprocess.run(
        [sys.executable, "-m", "whale.cli", *args], capture_output=True, text=True, timeout=timeout,
        env=env or ENV,
    )  # fmt: skip


def assert_user_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("whale: error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    for needle in needles:
        assert needle in lines[0]


def test_user_errors_print_one_line_and_exit_2(tmp_path):
    assert_user_error(whale("run", "--preset", "tiny", "--set", "rft.kk=1", "--out", str(tmp_path / "r")),
                      "unknown key 'rft.kk'; did you mean 'rft.k'?")  # fmt: skip
    assert not (tmp_path / "r").exists()
    (tmp_path / "a-file").write_text("x")
    assert_user_error(
        whale("run", "--preset", "tiny", "--out", str(tmp_path / "a-file")), "a file, not a folder"
    )
    assert_user_error(whale("run", "--preset", "tiny", "--set", "rft.k=-1"), "rft.k")
    assert_user_error(whale("run", "--config", str(tmp_path / "missing.yaml")), "config file not found")
    assert_user_error(whale("run", "--resume", str(tmp_path)), "no config.yaml")


def test_harness_seed_prints_the_domains_seed_harness():
    from whale.domains.chess import ChessDomain

    proc = whale("harness", "seed", "--domain", "chess")
    assert proc.returncode == 0 and proc.stdout == ChessDomain().seed_harness(), proc.stderr


def check_complete_run(out: Path) -> dict:
    state = read_json(out / "state.json")
    trained = state["weight_steps"] > 0  # harness-only never trains: no train rollouts
    updated = state["weights_version"] != "w0"  # ... and no checkpoints, as when no step kept anything
    searched = state["search_iters"] > 0  # weight-only never searches: no frontier
    for name in ("config.yaml", "events.jsonl", "evals.jsonl", "state.json",
                 "summary.json", "search/candidates/c0000/harness.py", "search/candidates/c0000/meta.json",
                 *(["rollouts/train.jsonl"] if trained else []),
                 *(["search/frontier.json", "search/evolution_summary.jsonl"] * searched)):  # fmt: skip
        assert (out / name).is_file(), name
    assert state["finished"] is True
    budget = state["budget"]
    spent, limit = budget["train_rollouts"] + budget["search_rollouts"], budget["limit_rollouts"]
    end = read_jsonl(out / "events.jsonl")[-1]
    assert spent <= limit  # the last unit is cut to fit
    assert spent == limit or "rollouts left fit no unit" in end["reason"] or "stopped early" in end["reason"]
    if updated:
        checkpoints = [p.name for p in (out / "checkpoints").iterdir()]
        assert state["checkpoint"] in checkpoints and not [c for c in checkpoints if c.startswith(".")]
        assert set(checkpoints) == set(state["kept_checkpoints"]) | {state["checkpoint"]}
        assert (out / "checkpoints" / state["checkpoint"] / "weights.safetensors").is_file()
    else:
        assert state["checkpoint"] is None and not list((out / "checkpoints").glob("*"))
    seed = read_json(out / "search/candidates/c0000/meta.json")
    assert seed["status"] == "seed" and seed["parent"] is None
    assert "def run(task, llm, tools)" in (out / "search/candidates/c0000/harness.py").read_text()

    points = read_jsonl(out / "evals.jsonl")
    assert [p["point"] for p in points] == list(range(len(points))) and len(points) == state["eval_points"]
    for p in points:
        assert (out / "evals" / f"{p['point']:03d}" / "test.jsonl").is_file()
        assert 0.0 <= p["test"]["ci_low"] <= p["test"]["mean"] <= p["test"]["ci_high"] <= 1.0
    events = read_jsonl(out / "events.jsonl")
    steps = [e for e in events if e["event"] == "weight_step"]
    assert [e["step"] for e in steps] == list(range(1, state["weight_steps"] + 1))
    iters = [e for e in events if e["event"] == "search_iteration"]
    assert [e["iteration"] for e in iters] == list(range(1, state["search_iters"] + 1))
    assert sum(e["total"] for e in steps) == budget["train_rollouts"]
    assert jsonl_line_count(out / "rollouts/train.jsonl") == budget["train_rollouts"]
    assert events[-1]["event"] == "end" and sum(e["event"] == "end" for e in events) == 1
    assert state["log_lines"] == {name: jsonl_line_count(out / name) for name in LOGS}
    assert sorted(p.name for p in (out / "search/candidates").iterdir()) == state["candidates"]
    for cid in state["candidates"]:
        assert read_json(out / "search/candidates" / cid / "meta.json")["id"] == cid
    summary = read_json(out / "summary.json")
    assert summary["budget"] == budget and summary["final_harness"] == state["incumbent"]
    assert summary["before"] == points[0]["test"] and summary["after"] == points[-1]["test"]
    return state


def test_complete_tiny_run_writes_the_run_directory(tmp_path):
    out = tmp_path / "run"
    proc = cold_whale("run", "--preset", "tiny", "--out", str(out))  # the command as a user starts it
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "test mean@k: before" in proc.stdout
    state = check_complete_run(out)
    assert state["weight_steps"] >= 2 and state["search_iters"] >= 1
    start = read_jsonl(out / "events.jsonl")[0]  # the defaults: engine and dtypes as measured, and why
    engine, ran = start["compute"]["engine"], start["config"]
    why = "auto: the model has no folder for vLLM to load"  # the default engine.kind, on the tiny model
    dtype = ran["engine"]["dtype"]
    lockstep = "; lockstep \\(bfloat16 draws repeat only in fixed batches\\)" if dtype == "bfloat16" else ""
    assert re.fullmatch(rf"fast {dtype} \(auto: .+, \d+ torch threads\); {why}{lockstep}", engine), engine
    assert ran["engine"]["kind"] == "fast"  # the config as run, with auto resolved
    asked = yaml.safe_load((out / "config.yaml").read_text())
    assert asked["engine"]["kind"] == "auto"  # as asked: a resume decides the engine again
    assert asked["engine"]["dtype"] == asked["weights"]["dtype"] == "auto"  # and keeps the dtypes as run
    trainer = start["compute"]["trainer"]
    assert ran["weights"]["dtype"] == trainer and trainer in ("float32", "bfloat16")
    assert f"compute: engine {engine}; trainer {trainer}" in proc.stdout
    candidates = state["candidates"]
    assert len(candidates) >= 2  # the search proposed at least one challenger
    for cid in candidates[1:]:
        meta = read_json(out / "search/candidates" / cid / "meta.json")
        assert meta["proposer"] in ("program", "mutation") and meta["status"] != "proposed"
    frontier = read_json(out / "search/frontier.json")
    assert frontier["candidates"] and frontier["weights_version"].startswith("w")
    assert all({"mean", "tokens_per_rollout", "calls_per_rollout"} <= set(c) for c in frontier["candidates"])

    listing = whale("archive", "show", str(out))
    assert listing.returncode == 0 and all(f"│ {cid} " in listing.stdout for cid in candidates)
    detail = whale("archive", "show", str(out), candidates[1], "--failing", "1")
    hypothesis = read_json(out / "search/candidates" / candidates[1] / "meta.json")["hypothesis"]
    assert detail.returncode == 0 and f"hypothesis: {hypothesis}" in detail.stdout
    assert "def run(task" in detail.stdout
    diff = whale("archive", "diff", str(out), "c0000", candidates[1])
    assert diff.returncode == 0 and "--- c0000/harness.py" in diff.stdout
    assert_user_error(whale("archive", "show", str(out), "c9999"), "c9999: not in")
    assert_user_error(whale("archive", "show", str(out / "nope")), "no harness archive")
    train = read_jsonl(out / "rollouts/train.jsonl")
    assert all(r["calls"] and r["calls"][0]["prompt_ids"] and "gold" not in r for r in train)

    # a second run into the same directory is refused; resuming a finished run changes nothing
    assert_user_error(whale("run", "--preset", "tiny", "--out", str(out)), "already holds a run")
    before = {name: read_jsonl(out / name) for name in LOGS if name != "events.jsonl"}
    again = whale("run", "--resume", str(out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert {name: read_jsonl(out / name) for name in before} == before
    assert read_json(out / "state.json")["budget"] == state["budget"]


def uncommitted_lines(out: Path, state: dict) -> bool:
    counted = state.get("log_lines") or {}
    return any(jsonl_line_count(out / name) > counted.get(name, 0) for name in LOGS)


@contextmanager
def run_in_background(out: Path, *overrides: str) -> Iterator[subprocess.Popen]:
    """A tiny run in its own process group, yielded once it is inside a unit: committed work up to
    unit >= 2 and log lines written after that commit. Killed (SIGKILL, whole group) on exit."""
    cmd = [sys.executable, "-m", "whale.cli", "run", "--preset", "tiny", "--out", str(out)]
    for item in overrides:
        cmd += ["--set", item]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, f"run ended before it could be killed: {proc.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "run never reached unit 2"
            try:
                state = read_json(out / "state.json")
            except (FileNotFoundError, json.JSONDecodeError):
                state = {}
            if state.get("unit", 0) >= 2 and uncommitted_lines(out, state):
                break
            time.sleep(0.002)  # harness-only units on the tiny model last milliseconds
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_kill_and_resume_counts_nothing_twice(tmp_path):
    out = tmp_path / "run"
    with run_in_background(out, "schedule.budget_rollouts=120") as proc:
        # while it runs: another terminal sees it running, and a second process may not touch it
        assert f"running (pid {proc.pid})" in whale("status", str(out)).stdout
        assert_user_error(whale("run", "--resume", str(out)), "in use by a running whale process")
    killed_state = read_json(out / "state.json")
    assert killed_state["finished"] is False
    assert "stopped (resumable)" in whale("status", str(out)).stdout

    resumed = whale("run", "--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    state = check_complete_run(out)
    assert state["unit"] > killed_state["unit"]
    assert ": finished" in whale("status", str(out)).stdout and not (out / "run.pid").exists()
    events = read_jsonl(out / "events.jsonl")
    assert [e["unit"] for e in events if e["event"] == "resume"] == [killed_state["unit"]]
    points = read_jsonl(out / "evals.jsonl")
    assert len({p["point"] for p in points}) == len(points)
    train_total = sum(e["total"] for e in events if e["event"] == "weight_step")
    assert train_total == state["budget"]["train_rollouts"]
    assert jsonl_line_count(out / "rollouts/train.jsonl") == train_total
    assert state["budget"]["train_rollouts"] + state["budget"]["search_rollouts"] >= 120


def test_steps_that_keep_nothing_leave_weights_checkpoints_and_scores_alone(tmp_path):
    """No rollout reaches the threshold: each weight step trains nothing, so the weights keep their label,
    no checkpoint is written, later points are copies and the incumbent is scored once, across a resume."""
    out = tmp_path / "run"
    overrides = ("rft.reward_threshold=2", "schedule.budget_rollouts=120")
    with run_in_background(out, *overrides):
        pass
    resumed = whale("run", "--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    state = check_complete_run(out)
    assert state["weights_version"] == "w0" and state["checkpoint"] is None
    events = read_jsonl(out / "events.jsonl")
    steps = [e for e in events if e["event"] == "weight_step"]
    assert len(steps) >= 4 and all(e["optimizer_steps"] == 0 and e["weights"] == "w0" for e in steps)
    assert "no update: w0 stays" in resumed.stdout
    assert state["search_iters"] >= 2 and sum(e["event"] == "reeval" for e in events) == 1
    points = read_jsonl(out / "evals.jsonl")
    assert all(p["weights"] == "w0" for p in points)
    assert [p.get("repeats") for p in points[1:]] == [p["point"] for p in points[:-1]]


def test_a_domain_error_leaves_no_run_directory(tmp_path):
    out = tmp_path / "r"
    assert_user_error(
        whale("run", "--preset", "tiny", "--set", "domain.options.bogus=1", "--out", str(out)), "bogus"
    )
    assert not out.exists()
    bad_harness = tmp_path / "h.py"
    bad_harness.write_text("import os\ndef run(task, llm, tools):\n    return ''\n")
    assert_user_error(
        whale("run", "--preset", "tiny", "--set", f"domain.harness={bad_harness}", "--out", str(out)),
        "import of 'os'",
    )
    assert not out.exists()
