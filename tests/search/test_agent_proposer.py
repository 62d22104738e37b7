"""The agent proposer with real scripted agent programs (tests/fixtures/agents/), real processes, and the
real Landlock sandbox where the kernel has it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.processes import alive
from whale.core.config import ProposerConfig
from whale.core.files import append_jsonl, atomic_write_json
from whale.harness import landlock
from whale.harness.records import HarnessCandidate
from whale.search.agent_proposer import PRESETS, AgentProposer, parse_usage
from whale.search.archive import Archive
from whale.search.proposer import ProposalRequest, ProposerUsage, full_brief

AGENTS = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
BODY = '\n\ndef run(task, llm, tools):\n    return llm.chat([{"role": "user", "content": PROMPT}])\n'
SEED = 'PROMPT = "add"\n' + BODY
OTHER = 'PROMPT = "sum"\n' + BODY
GOLD = "GOLD-ANSWER-31337"


@pytest.fixture
def archive(tmp_path: Path) -> Archive:
    arch = Archive(tmp_path / "search")
    arch.add(HarnessCandidate("c0000", SEED, None, "seed harness", "seed"), status="seed")
    arch.add(HarnessCandidate("c0001", OTHER, "c0000", "other prompt", "mutation"), status="evaluated")
    for cid, mean in (("c0000", 0.25), ("c0001", 0.5)):
        ev = {"candidate_id": cid, "weights_version": "w1", "per_task": {"t0": mean}, "mean": mean,
              "tokens_per_rollout": 10.0, "calls_per_rollout": 1.0, "errors": 0}  # fmt: skip
        atomic_write_json(arch.candidates_dir / cid / "evals" / "w1.json", ev)
        append_jsonl(arch.candidates_dir / cid / "traces" / "w1.jsonl", [{"task": "t0", "reward": mean}])
        append_jsonl(arch.root / "evolution_summary.jsonl", [ev])
    atomic_write_json(arch.root / "frontier.json", {"weights_version": "w1", "candidates": [{"id": "c0001"}]})
    (arch.root / "sessions").mkdir()
    (arch.root / "sessions" / "old.txt").write_text("earlier session log")
    return arch


def request(archive: Archive, n: int = 2, parents: tuple[str, ...] = ("c0001", "c0000")) -> ProposalRequest:
    counter = iter(range(len(archive.ids()), 10**6))
    return ProposalRequest(archive, [archive.load(p) for p in parents], n, lambda: f"c{next(counter):04d}",
                           "w1", full_brief("Add two numbers."), 0)  # fmt: skip


def config(script: str, *args: str, **kw) -> ProposerConfig:
    command = [sys.executable, str(AGENTS / script), "{workspace}", "{n}", *args]
    return ProposerConfig(kind="agent", command=command, readable=[str(AGENTS)], **kw)


def only_session(archive: Archive) -> Path:
    sessions = sorted(p for p in (archive.root / "sessions").iterdir() if p.is_dir())
    assert len(sessions) == 1, sessions
    return sessions[0]


def test_good_agent_reads_the_archive_copy_and_proposes(archive, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("WHALE_TEST_PRIVATE", "not for the agent")
    usage = ProposerUsage()
    proposal = AgentProposer(config("good.py"), usage).propose(request(archive))
    assert len(proposal.candidates) == 1, proposal.note
    cand = proposal.candidates[0]
    assert cand.id == "c0002" and cand.proposer == "agent" and cand.parent == "c0000"
    assert cand.source == "RETRIES = 2\n" + SEED and cand.hypothesis == "retry twice, from c0000"
    assert proposal.note.startswith("1 candidate;") and "stderr 1 lines" in proposal.note
    if landlock.abi_version() > 0:
        assert "landlock on" in proposal.note
    assert "violation" not in proposal.note
    assert proposal.cost["tokens"] == 125 and proposal.cost["usd"] == pytest.approx(0.0125)
    assert usage.sessions == 1 and usage.tokens == 125 and usage.usd == pytest.approx(0.0125)
    assert usage.seconds > 0

    folder = only_session(archive)
    assert folder.name == "0000-agent-0"
    seen = json.loads((folder / "proposals" / "seen.json").read_text())
    assert seen["archive"] == ["candidates", "evolution_summary.jsonl", "frontier.json"]  # no sessions/
    assert seen["incumbent"] == "c0001" and seen["n"] == 2
    assert seen["tmpdir"].endswith("/tmp") and not os.path.exists(seen["tmpdir"])  # the workspace is gone
    assert "ANTHROPIC_API_KEY" in seen["env"] and "WHALE_TEST_PRIVATE" not in seen["env"]
    assert {"PATH", "HOME", "LANG", "TMPDIR"} <= set(seen["env"])
    record = json.loads((folder / "session.json").read_text())
    assert record["returncode"] == 0 and record["candidates"][0]["id"] == "c0002"
    assert json.loads((folder / "stdout.txt").read_text())["type"] == "result"
    command = json.loads((folder / "command.json").read_text())
    assert "{prompt}" not in " ".join(command["argv"]) and str(archive.root) not in " ".join(
        command["sandbox"]["read"] + command["sandbox"]["write"]
    )
    assert archive.load("c0000").source == SEED  # the real archive is untouched


def test_hanging_agent_is_killed_with_its_whole_process_group(archive):
    usage = ProposerUsage()
    started = time.monotonic()
    proposal = AgentProposer(config("hang.py", timeout_s=2.0), usage).propose(request(archive))
    assert time.monotonic() - started < 8
    assert "timed out after 2 s" in proposal.note and proposal.candidates == []  # no *.py fallback
    assert usage.sessions == 1 and usage.seconds >= 2
    agent_pid, grandchild = map(int, (only_session(archive) / "proposals" / "pids.txt").read_text().split())
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and (alive(agent_pid) or alive(grandchild)):
        time.sleep(0.05)
    assert not alive(agent_pid) and not alive(grandchild)


@pytest.mark.parametrize("mode, timeout", [("exit", 30.0), ("hang", 2.0)])
def test_a_daemon_that_left_the_process_group_dies_with_the_session(archive, mode, timeout):
    """setsid() takes a process out of the group kill; the wrapper, its subreaper, kills it anyway."""
    AgentProposer(config("daemon.py", mode, timeout_s=timeout), ProposerUsage()).propose(request(archive))
    daemon = int((only_session(archive) / "proposals" / "daemon.txt").read_text())
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and alive(daemon):
        time.sleep(0.05)
    assert not alive(daemon)


def test_the_sessions_processes_die_even_when_the_wrapper_is_killed_outright(tmp_path):
    """whale killed with SIGKILL gives the wrapper no chance to clean up (its subreaper loop never runs);
    the session's PID namespace dies with it, the setsid() daemon included."""
    (tmp_path / "proposals").mkdir()
    argv = [sys.executable, str(AGENTS / "daemon.py"), str(tmp_path), "1", "hang"]
    wrapper = subprocess.Popen(
        landlock.wrapper_argv({"enforce": False, "parent_pid": os.getpid()}, argv),
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    record, daemon = tmp_path / "proposals" / "daemon.txt", 0
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (record.exists() and record.read_text()):
            time.sleep(0.05)
        daemon = int(record.read_text())
        assert alive(daemon)
        wrapper.kill()
        wrapper.wait()
        if "pid namespace on" not in wrapper.stderr.read():
            pytest.skip("no PID namespace here (needs root or unprivileged user namespaces)")
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and alive(daemon):
            time.sleep(0.05)
        assert not alive(daemon)
    finally:
        if daemon and alive(daemon):
            os.kill(daemon, signal.SIGKILL)


def test_the_agent_gets_a_throwaway_home_with_only_its_login_files(archive, tmp_path, monkeypatch):
    home = tmp_path / "real-home"
    (home / ".agent").mkdir(parents=True)
    (home / ".agent" / "login.json").write_text('{"token": "t"}')
    (home / "private.txt").write_text("not for the agent")
    monkeypatch.setenv("HOME", str(home))
    cfg = config("good.py", home_files=["~/.agent/login.json", "~/missing.json", "/etc/hostname"])
    proposal = AgentProposer(cfg, ProposerUsage()).propose(request(archive))
    assert len(proposal.candidates) == 1 and "violation" not in proposal.note, proposal.note
    folder = only_session(archive)
    seen = json.loads((folder / "proposals" / "seen.json").read_text())
    assert seen["home"] != str(home) and seen["home"].endswith("/home") and seen["home_listing"] == [".agent"]
    assert json.loads((folder / "command.json").read_text())["home_files"] == [".agent/login.json"]
    assert not os.path.exists(seen["home"])  # thrown away with the workspace
    assert sorted(os.listdir(home)) == [".agent", "private.txt"]  # the real one is untouched


def test_garbage_files_and_malformed_pending_eval_are_recorded(archive):
    proposal = AgentProposer(config("garbage.py", "files"), ProposerUsage()).propose(request(archive, n=5))
    assert [c.source for c in proposal.candidates] == ["this is not python at all\n"]
    cand = proposal.candidates[0]
    assert cand.hypothesis == "(no pending_eval.json)" and cand.parent == "c0001"
    note = proposal.note
    assert "pending_eval.json malformed" in note
    for expected in ("big.py (too big:", "blob.py (not UTF-8", "fifo.py (not a regular file)",
                     "link.py (symlink)", "nul.py (binary:"):  # fmt: skip
        assert expected in json.dumps(json.loads((only_session(archive) / "session.json").read_text()))
    assert "rejected:" in note


def test_pending_eval_entries_outside_proposals_are_rejected(archive):
    proposal = AgentProposer(config("garbage.py", "entries"), ProposerUsage()).propose(request(archive, n=5))
    assert [c.source for c in proposal.candidates] == ["def run(task, llm, tools):\n    return 'ok'\n"]
    assert proposal.candidates[0].parent == "c0001"  # "c9999" is not in the archive: the incumbent
    rejected = json.loads((only_session(archive) / "session.json").read_text())["rejected"]
    assert rejected == [
        "../TASK.md (path escapes proposals/)",
        "/etc/hostname (path escapes proposals/)",
        "sub/../../BRIEF.md (path escapes proposals/)",
        "missing.py (no such file)",
        "blob.py (not UTF-8 text)",
        "link.py (symlink)",
        "fifo.py (not a regular file)",
        "sub/ok.py (listed twice)",
    ]


def _escape(archive: Archive, tmp_path: Path) -> tuple:
    gold = tmp_path / "data" / "test_split.jsonl"  # stands for the run's held-out data
    gold.parent.mkdir()
    gold.write_text(GOLD)
    outside = tmp_path / "outside.txt"
    cfg = config("escape.py", str(outside), str(gold))
    proposal = AgentProposer(cfg, ProposerUsage()).propose(request(archive))
    folder = only_session(archive)
    return proposal, folder, gold, outside


def _assert_detected(proposal, folder: Path) -> None:
    """Without Landlock the writes happen; the workspace comparison must catch those inside the workspace."""
    assert "landlock unavailable: writes outside proposals/ are detected, not prevented" in proposal.note
    violations = json.loads((folder / "session.json").read_text())["violations"]
    assert "modified archive/candidates/c0000/harness.py" in violations
    assert "created ROOT.txt" in violations
    assert "containment violation" in proposal.note
    assert proposal.candidates == [] and "proposals discarded" in proposal.note


def test_escaping_agent_is_contained(archive, tmp_path):
    proposal, folder, gold, outside = _escape(archive, tmp_path)
    attempts = json.loads((folder / "proposals" / "attempts.json").read_text())
    assert json.loads((folder / "stdout.txt").read_text()) == attempts
    assert (folder / "session.json").exists() and (folder / "command.json").exists()
    if landlock.abi_version() == 0:
        _assert_detected(proposal, folder)
        return
    assert "landlock on" in proposal.note and "violation" not in proposal.note
    for name in ("archive", "root", "outside", "append_gold", "read_gold", "list_gold_dir"):
        assert attempts[name].startswith("PermissionError"), (name, attempts[name])
    assert not outside.exists() and gold.read_text() == GOLD
    assert len(proposal.candidates) == 1 and GOLD not in proposal.candidates[0].source
    assert archive.load("c0000").source == SEED


def test_without_landlock_violations_are_detected(archive, tmp_path, monkeypatch):
    monkeypatch.setattr(landlock, "abi_version", lambda: 0)
    proposal, folder, gold, outside = _escape(archive, tmp_path)
    _assert_detected(proposal, folder)
    assert archive.load("c0000").source == SEED  # only the copy was changed


def test_session_budget_stops_the_next_session(archive):
    usage = ProposerUsage()
    proposer = AgentProposer(config("good.py", max_sessions=1), usage)
    assert len(proposer.propose(request(archive)).candidates) == 1
    second = proposer.propose(request(archive))
    assert second.exhausted and second.candidates == [] and "1 of 1 sessions" in second.note
    assert usage.sessions == 1 and len(list((archive.root / "sessions").iterdir())) == 2  # old.txt + one


def test_missing_executable_is_a_note(archive):
    usage = ProposerUsage()
    cfg = ProposerConfig(kind="agent", command=["no-such-agent-cli-xyz", "{prompt}"])
    proposal = AgentProposer(cfg, usage).propose(request(archive))
    assert proposal.candidates == [] and not proposal.exhausted
    assert "agent command not found: 'no-such-agent-cli-xyz'" in proposal.note
    assert usage.sessions == 0
    none = AgentProposer(ProposerConfig(kind="agent"), usage).propose(request(archive))
    assert none.candidates == [] and "no command configured" in none.note


def test_presets_and_usage_parsing():
    assert PRESETS["claude"]["command"][:3] == ["claude", "-p", "{prompt}"]
    assert PRESETS["codex"]["command"][:2] == ["codex", "exec"]
    usage = {"input_tokens": 10, "cache_creation_input_tokens": 5, "output_tokens": 1}
    result = {"type": "result", "subtype": "error_max_turns", "is_error": True, "total_cost_usd": 0.5}
    claude = json.dumps({**result, "usage": usage})
    tokens, usd, reported = parse_usage(claude + "\n", "")
    assert (tokens, usd, reported["is_error"], reported["subtype"]) == (16, 0.5, True, "error_max_turns")
    assert parse_usage("final answer", "[ts] tokens used: 12,345\n")[:2] == (12345, 0.0)
    turn = {
        "type": "turn.completed",
        "usage": {"input_tokens": 7, "cached_input_tokens": 4, "output_tokens": 3},
    }
    events = json.dumps(turn) + "\n"
    assert parse_usage(events * 2, "")[:2] == (20, 0.0)
    assert parse_usage("", "")[:2] == (0, 0.0)


def test_a_careless_agent_cannot_crash_the_run_or_fill_the_disk(archive, monkeypatch):
    """1,200-deep folders (os.walk and shutil.rmtree recurse once per level), a flood on stdout, and a
    negative self-reported cost: the session ends, its proposal is read, the budget never grows."""
    monkeypatch.setattr("whale.search.agent_proposer.MAX_OUTPUT_BYTES", 1 << 20)
    usage, before = ProposerUsage(), set(Path(tempfile.gettempdir()).glob("whale-agent-*"))
    proposal = AgentProposer(config("unruly.py", str(8 << 20)), usage).propose(request(archive))
    assert len(proposal.candidates) == 1 and "violation" not in proposal.note, proposal.note
    assert usage.tokens == 0 and usage.usd == 0.0  # not -5,000,000 and $-1000
    folder = only_session(archive)
    assert (folder / "stdout.txt").stat().st_size <= 1 << 20  # the flood was cut at the cap
    assert set(Path(tempfile.gettempdir()).glob("whale-agent-*")) == before  # the deep workspace is gone


def test_negative_usage_is_not_counted():
    report = {"type": "result", "total_cost_usd": -3.0, "usage": {"input_tokens": -10, "output_tokens": 4}}
    assert parse_usage(json.dumps(report), "")[:2] == (4, 0.0)
