"""Fault injection with real processes: kill -9 of a whole run at six points of its life, a sandbox worker
killed mid-rollout, an engine that raises mid-batch, a coding agent killed mid-session, a full disk.

Nothing under test is mocked. The injected failures come from outside (signals, a tmpfs filled up) or
through a seam's test double (an engine that raises is the failure itself).
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import ENV, check_complete_run
from tests.processes import alive
from whale.core.config import ProposerConfig
from whale.core.files import (
    append_jsonl,
    atomic_write_json,
    jsonl_line_count,
    read_json,
    read_jsonl,
    truncate_jsonl,
)
from whale.harness.calls import RolloutJob, RunnerLimits
from whale.harness.records import HarnessCandidate
from whale.harness.runner import RolloutRunner
from whale.model.engine import SamplingParams
from whale.search.agent_proposer import AgentProposer
from whale.search.archive import Archive
from whale.search.proposer import ProposalRequest, ProposerUsage, full_brief

RUN = ["--preset", "tiny", "--set", "schedule.budget_rollouts=120"]
COUNTS = ("unit", "weight_steps", "search_iters", "eval_points")
SPENT = ("train_rollouts", "search_rollouts")
LOGS = ("events.jsonl", "evals.jsonl", "rollouts/train.jsonl", "search/evolution_summary.jsonl")
AGENTS = Path(__file__).resolve().parent / "fixtures" / "agents"
SAMPLING = SamplingParams(temperature=0.7, max_tokens=4)


# ---- processes --------------------------------------------------------------------------------------------


def start_run(args: list[str], log: Path) -> subprocess.Popen:
    """`whale run ...` in its own process group; stderr to a file (a pipe nobody reads could fill up)."""
    with open(log, "ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "whale.cli", "run", *args],
            stdout=subprocess.DEVNULL, stderr=err, env=ENV, start_new_session=True,
        )  # fmt: skip


def kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def state_of(out: Path) -> dict[str, Any]:
    try:
        return read_json(out / "state.json")
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def counts(state: dict[str, Any]) -> dict[str, int]:
    return {**{k: state[k] for k in COUNTS}, **{k: state["budget"][k] for k in SPENT}}


def processes_with_parent(pid: int) -> list[int]:
    """Live (not zombie) processes whose environment says `pid` started them (sandbox workers and python
    tool processes carry WHALE_PARENT_PID), wherever they were reparented to."""
    marker = f"WHALE_PARENT_PID={pid}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            status = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in environ.split(b"\0") and status not in ("Z", "X"):
            found.append(int(entry))
    return found


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Iterator[Callable[[], dict[str, int]]]:
    """One uninterrupted run of RUN, started in the background at first use; call it for its counts."""
    folder = tmp_path_factory.mktemp("reference")
    proc = start_run([*RUN, "--out", str(folder / "run")], folder / "stderr.txt")

    def result() -> dict[str, int]:
        assert proc.wait(timeout=600) == 0, (folder / "stderr.txt").read_text()[-3000:]
        return counts(check_complete_run(folder / "run"))

    yield result
    kill_group(proc)


# ---- kill -9 at six points, resume, same counts -----------------------------------------------------------


def uncommitted_candidates(out: Path, state: dict[str, Any]) -> bool:
    folder = out / "search" / "candidates"
    on_disk = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    return bool(on_disk - set(state.get("candidates") or []))


def uncommitted_train_rollouts(out: Path, state: dict[str, Any]) -> bool:
    """A weight step appended its rollouts (the evaluation that follows the unit may be running) and has
    not committed them. (events.jsonl is not looked at: a resumed run writes its resume event there.)"""
    committed = (state.get("log_lines") or {}).get("rollouts/train.jsonl", 0)
    return state.get("unit", 0) >= 1 and jsonl_line_count(out / "rollouts" / "train.jsonl") > committed


def resumed_and_logged(out: Path, state: dict[str, Any]) -> bool:
    """The resumed process has cut the logs back and written its resume event, and committed nothing yet."""
    committed = (state.get("log_lines") or {}).get("events.jsonl", 0)
    events = read_jsonl(out / "events.jsonl")
    return len(events) > committed and events[-1]["event"] == "resume"


# (name, condition on the run directory and its committed state, extra delay in seconds)
KILL_POINTS: list[tuple[str, Callable[[Path, dict[str, Any]], bool], float]] = [
    ("first evaluation, nothing but the start committed", lambda out, st: st.get("eval_points") == 0, 0.0),
    ("just after the first weight step committed", lambda out, st: st.get("unit", 0) >= 1, 0.0),
    ("weight step logged, evaluation running, not committed", uncommitted_train_rollouts, 0.0),
    ("search iteration with proposed, uncommitted candidates",
     lambda out, st: st.get("unit", 0) >= 2 and uncommitted_candidates(out, st), 0.0),
    ("resume start-up: logs cut back, resume event written", resumed_and_logged, 0.0),
    ("seeded moment inside a later unit", lambda out, st: st.get("unit", 0) >= 4,
     random.Random(20261129).uniform(0.0, 1.5)),
]  # fmt: skip


@pytest.mark.slow
def test_kill_9_at_six_points_and_resume_matches_an_uninterrupted_run(tmp_path, reference):
    out, log = tmp_path / "run", tmp_path / "stderr.txt"
    kills: list[dict[str, Any]] = []
    for i, (name, condition, delay) in enumerate(KILL_POINTS):
        args = [*RUN, "--out", str(out)] if i == 0 else ["--resume", str(out)]
        proc = start_run(args, log)
        try:
            deadline = time.monotonic() + 300
            while not condition(out, state_of(out)):
                assert proc.poll() is None, f"run ended before kill point {name!r}: {log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"kill point {name!r} never reached"
                time.sleep(0.02)
            time.sleep(delay)
            assert proc.poll() is None, f"run ended before kill point {name!r}: {log.read_text()[-3000:]}"
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            kill_group(proc)
        # the commit point is intact and unfinished; every log is readable; no sandbox worker survives
        state = read_json(out / "state.json")
        assert state["finished"] is False, name
        for path in LOGS:
            assert jsonl_line_count(out / path) >= (state["log_lines"] or {}).get(path, 0), (name, path)
        wait_until(lambda p=proc.pid: not processes_with_parent(p), 10, f"workers of {proc.pid} to die")
        kills.append({"name": name, "unit": state["unit"], "state": state})

    proc = start_run(["--resume", str(out)], log)
    assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    state = check_complete_run(out)
    assert counts(state) == reference()
    # a resumed session's resume event survives only if that session committed before it was killed
    resumes = [e["unit"] for e in read_jsonl(out / "events.jsonl") if e["event"] == "resume"]
    committed = [i == len(kills) - 1 or kills[i + 1]["state"] != k["state"] for i, k in enumerate(kills)]
    assert resumes == [k["unit"] for k, c in zip(kills, committed, strict=True) if c]
    assert committed[3] is False  # the session killed at start-up (kill 5) committed nothing
    assert [k["unit"] for k in kills] == sorted(k["unit"] for k in kills)
    points = read_jsonl(out / "evals.jsonl")
    assert [p["point"] for p in points] == list(range(state["eval_points"]))


# ---- a sandbox worker killed mid-rollout ------------------------------------------------------------------


class SignallingEngine:
    """Wraps the conftest FakeEngine; on a chat whose last message is "slow" it sets `entered` and takes a
    second, so that a worker can be killed while its request is being generated."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.weights_version = inner.weights_version
        self.entered = threading.Event()

    def generate(self, requests: list[Any], seed: int) -> list[Any]:
        if any(r.messages[-1]["content"] == "slow" for r in requests):
            self.entered.set()
            time.sleep(1.0)
        return self.inner.generate(requests, seed)


class SignallingDomain:
    """The conftest AddDomain, whose `add` tool sets `called` when asked to add (0, 0)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.called = threading.Event()
        self.name, self.brief = inner.name, inner.brief

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def toolbox(self, task: Any) -> Any:
        box, called = self.inner.toolbox(task), self.called

        class Box:
            names = box.names

            def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
                if args == [0, 0]:
                    called.set()
                return box.call(name, args, kwargs)

        return Box()


def recording_runner(engine: Any, domain: Any, **limits: Any) -> tuple[RolloutRunner, dict[str, int]]:
    """A real runner that notes which worker process each task was started on."""
    runner = RolloutRunner(engine, domain, SAMPLING, RunnerLimits(**limits), seed=1)
    pids: dict[str, int] = {}
    start_job = runner._start_job

    def recording(job: RolloutJob) -> Any:
        w = start_job(job)
        pids[job.task.id] = w.proc.pid
        return w

    runner._start_job = recording  # type: ignore[method-assign]
    return runner, pids


def kill_later(event: threading.Event, pid: Callable[[], int], delay: float = 0.2) -> threading.Thread:
    def run() -> None:
        if event.wait(30):
            time.sleep(delay)
            os.kill(pid(), signal.SIGKILL)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


SPIN = "def run(task, llm, tools):\n    tools.add(0, 0)\n    n = 0\n    while True:\n        n += 1\n"
SLOW_CHAT = "def run(task, llm, tools):\n    return llm.chat([{'role': 'user', 'content': 'slow'}])\n"


@pytest.mark.parametrize("where", ["computing", "waiting for the model"])
def test_a_worker_killed_mid_rollout_fails_only_that_rollout(add_domain, fake_engine, where):
    domain, engine = SignallingDomain(add_domain), SignallingEngine(fake_engine)
    runner, pids = recording_runner(engine, domain, workers=3, step_timeout_s=60.0)
    victim, good = add_domain.tasks[0], HarnessCandidate("good", add_domain.seed_harness())
    source, event = (SPIN, domain.called) if where == "computing" else (SLOW_CHAT, engine.entered)
    try:
        killer = kill_later(event, lambda: pids[victim.id])
        started = time.monotonic()
        rollouts = runner.run(
            [RolloutJob(victim, HarnessCandidate("victim", source), 0)]
            + [RolloutJob(t, good, 0) for t in add_domain.tasks[1:5]]
        )
        killer.join(5)
        assert time.monotonic() - started < 30  # the kill ended the rollout, not a timeout
        killed = rollouts[0]
        assert killed.error.startswith("killed: ") and killed.reward == 0.0  # the reason is recorded
        assert killed.answer is None
        if where == "waiting for the model":
            assert len(killed.calls) == 1  # generated before the kill was noticed, and recorded
        assert not alive(pids[victim.id])  # reaped, not a zombie
        for r, t in zip(rollouts[1:], add_domain.tasks[1:5], strict=True):
            assert r.error is None and r.reward == 1.0 and r.answer == t.gold["answer"]
        killed_pid = pids[victim.id]
        (again,) = runner.run([RolloutJob(victim, good, 1)])  # the runner goes on, on another worker
        assert again.error is None and again.reward == 1.0 and pids[victim.id] != killed_pid
    finally:
        runner.close()


# ---- an engine that raises mid-batch ----------------------------------------------------------------------


class FailingEngine:
    """The engine seam's test double: answers like the conftest FakeEngine, raises on its nth batch."""

    def __init__(self, inner: Any, fail_on: int):
        self.inner, self.fail_on, self.calls = inner, fail_on, 0
        self.weights_version = inner.weights_version

    def generate(self, requests: list[Any], seed: int) -> list[Any]:
        self.calls += 1
        if self.calls == self.fail_on:
            raise RuntimeError(f"injected engine failure on batch {self.calls} ({len(requests)} requests)")
        return self.inner.generate(requests, seed)


TWO_CHATS = (
    "def run(task, llm, tools):\n"
    "    llm.chat([{'role': 'user', 'content': 'first'}])\n"
    "    llm.chat([{'role': 'user', 'content': 'second'}])\n"
    "    return str(tools.add(task['a'], task['b']))\n"
)


def spawn_recorder(runner: RolloutRunner) -> list[subprocess.Popen]:
    spawned: list[subprocess.Popen] = []
    spawn = runner._spawn

    def recording() -> Any:
        w = spawn()
        spawned.append(w.proc)
        return w

    runner._spawn = recording  # type: ignore[method-assign]
    return spawned


def test_an_engine_error_mid_batch_stops_the_run_call_with_that_error(add_domain, fake_engine):
    """Intended: an engine failure is not a harness failure. The runner does not turn it into failed
    rollouts (that would score every harness 0 and train on nothing); run() raises it at once, and the
    experiment stops at its last commit, from where --resume redoes the unit."""
    engine = FailingEngine(fake_engine, fail_on=2)
    runner = RolloutRunner(engine, add_domain, SAMPLING, RunnerLimits(workers=3), seed=1)
    jobs = [RolloutJob(t, HarnessCandidate("two", TWO_CHATS), 0) for t in add_domain.tasks[:5]]
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="injected engine failure on batch 2"):
            runner.run(jobs)
        assert time.monotonic() - started < 10  # no hang waiting on workers blocked on the model
    finally:
        runner.close()


def test_an_engine_error_leaves_no_workers_and_a_usable_runner(add_domain, fake_engine):
    engine = FailingEngine(fake_engine, fail_on=2)
    runner = RolloutRunner(engine, add_domain, SAMPLING, RunnerLimits(workers=3), seed=1)
    spawned = spawn_recorder(runner)
    jobs = [RolloutJob(t, HarnessCandidate("two", TWO_CHATS), 0) for t in add_domain.tasks[:5]]
    try:
        with pytest.raises(RuntimeError):
            runner.run(jobs)
        # a worker of the failed call dies (e.g. of its CPU limit): the next call must not trip on it
        survivors = [p for p in spawned if p.poll() is None and alive(p.pid)]
        if survivors:
            os.kill(survivors[0].pid, signal.SIGKILL)
            time.sleep(0.2)
        rollouts = runner.run(
            [RolloutJob(t, HarnessCandidate("two", TWO_CHATS), 1) for t in add_domain.tasks]
        )
        assert all(r.error is None for r in rollouts)
    finally:
        runner.close()
    wait_until(lambda: not [p for p in spawned if alive(p.pid)], 5, "every worker to be gone after close()")


# ---- a coding agent killed mid-session --------------------------------------------------------------------


def agent_children() -> list[int]:
    """Children of this process running the hanging scripted agent."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"hang.py" in cmdline:
            found.append(int(entry))
    return found


def test_an_agent_killed_mid_session_gives_a_proposal_with_a_note(tmp_path):
    archive = Archive(tmp_path / "search")
    seed = "def run(task, llm, tools):\n    return llm.chat([{'role': 'user', 'content': 'add'}])\n"
    archive.add(HarnessCandidate("c0000", seed, None, "seed harness", "seed"), status="seed")
    counter = iter(range(1, 100))
    request = ProposalRequest(archive, [archive.load("c0000")], 2, lambda: f"c{next(counter):04d}", "w0",
                              full_brief("Add two numbers."), 0)  # fmt: skip
    command = [sys.executable, str(AGENTS / "hang.py"), "{workspace}", "{n}"]
    cfg = ProposerConfig(kind="agent", command=command, readable=[str(AGENTS)], timeout_s=120.0)
    usage, result = ProposerUsage(), {}
    thread = threading.Thread(
        target=lambda: result.update(proposal=AgentProposer(cfg, usage).propose(request))
    )
    started = time.monotonic()
    thread.start()
    try:
        wait_until(lambda: len(agent_children()) == 1, 30, "the agent to start")
        (agent,) = agent_children()
        workspace = Path(os.readlink(f"/proc/{agent}/cwd"))
        written = workspace / "proposals"
        wait_until(lambda: (written / "pids.txt").is_file() and (written / "half.py").is_file(), 30,
                   "the agent to write its files")  # fmt: skip
        agent_pid, grandchild = map(int, (written / "pids.txt").read_text().split())

        def parent(pid: int) -> int:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])

        # the agent runs under the sandbox wrapper, its subreaper (through the PID namespace's init if any)
        assert agent in (parent(agent_pid), parent(parent(agent_pid)))
        os.killpg(agent, signal.SIGKILL)  # from outside: as the OOM killer or a user would
        thread.join(30)
    finally:
        if thread.is_alive():
            for pid in agent_children():
                os.killpg(pid, signal.SIGKILL)
            thread.join(30)
    assert time.monotonic() - started < 60  # ended by the kill, not by timeout_s
    proposal = result["proposal"]
    assert "exit -9" in proposal.note and "timed out" not in proposal.note
    assert usage.sessions == 1 and usage.seconds > 0
    # Documented behaviour: a killed (not timed-out) session still takes the *.py files the agent left;
    # the half-written file becomes a candidate that validation will mark invalid.
    assert [c.source for c in proposal.candidates] == ["def run(task, llm, tools):\n"]
    assert not workspace.exists()  # the workspace is removed
    wait_until(lambda: not alive(grandchild), 5, "the agent's grandchild to die")
    (session,) = [p for p in (archive.root / "sessions").iterdir() if p.is_dir()]
    record = json.loads((session / "session.json").read_text())
    assert record["returncode"] == -9 and record["timed_out"] is False
    assert archive.ids() == ["c0000"]  # the proposer writes nothing into the archive itself


# ---- a full disk under the run directory ------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 32 MiB tmpfs to fill up; unmounted afterwards. Needs root (CAP_SYS_ADMIN)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(folder)],
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder: Path) -> Path:
    """Fill the filesystem of `folder` to the last byte; returns the filler file (delete it to free)."""
    filler = folder / "filler"
    with open(filler, "ab", buffering=0) as f:
        for size in (1 << 20, 1 << 12, 1):
            chunk = b"\0" * size
            while True:
                try:
                    f.write(chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    return filler


def test_store_writes_on_a_full_disk_fail_naming_the_file_and_keep_the_old_content(small_disk):
    run = small_disk / "run"
    state, log = run / "state.json", run / "events.jsonl"
    atomic_write_json(state, {"unit": 1})
    append_jsonl(log, [{"event": "start"}])
    filler = fill(small_disk)

    with pytest.raises(OSError) as info:
        atomic_write_json(state, {"unit": 2, "pad": "x" * 100_000})
    assert info.value.errno == errno.ENOSPC and str(state) in str(info.value)
    assert read_json(state) == {"unit": 1}  # the previous commit point, whole
    with pytest.raises(OSError) as info:  # fits partly into the log's last page, then fails
        append_jsonl(log, [{"event": "x", "pad": "y" * 100_000}])
    assert info.value.errno == errno.ENOSPC and str(log) in str(info.value)
    assert log.read_bytes() == b'{"event": "start"}\n'  # cut back: no torn record left behind
    with pytest.raises(OSError):
        truncate_jsonl(log, 1)
    assert read_jsonl(log) == [{"event": "start"}]
    assert sorted(p.name for p in run.iterdir()) == ["events.jsonl", "state.json"]  # no temp files

    filler.unlink()
    append_jsonl(log, [{"event": "after"}])
    atomic_write_json(state, {"unit": 2})
    assert read_jsonl(log) == [{"event": "start"}, {"event": "after"}] and read_json(state) == {"unit": 2}


@pytest.mark.slow
def test_a_run_whose_disk_fills_up_stops_at_a_valid_commit_and_resumes(small_disk, tmp_path, reference):
    out, log = small_disk / "run", tmp_path / "stderr.txt"
    proc = start_run([*RUN, "--out", str(out)], log)
    try:
        deadline = time.monotonic() + 300
        while state_of(out).get("unit", 0) < 2:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the run never reached unit 2"
            time.sleep(0.05)
        filler = fill(small_disk)
        code = proc.wait(timeout=300)
    finally:
        kill_group(proc)
    assert code != 0, "the run finished on a full disk?"
    state = read_json(out / "state.json")  # the last commit, complete and parseable
    assert state["finished"] is False and state["unit"] >= 2
    leftovers = [p.name for p in out.rglob(".*.tmp") if p.is_file()]
    assert not leftovers, leftovers  # failed atomic writes removed their temp files
    for path in LOGS:  # no corrupt record anywhere; the committed prefix is intact
        assert jsonl_line_count(out / path) >= (state["log_lines"] or {}).get(path, 0), path

    filler.unlink()
    resumed = subprocess.run([sys.executable, "-m", "whale.cli", "run", "--resume", str(out)],
                             capture_output=True, text=True, env=ENV, timeout=600)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert counts(check_complete_run(out)) == reference()


@pytest.mark.slow
def test_a_full_disk_is_reported_in_one_line(small_disk):
    fill(small_disk)
    out = small_disk / "run"
    proc = subprocess.run([sys.executable, "-m", "whale.cli", "run", *RUN, "--out", str(out)],
                          capture_output=True, text=True, env=ENV, timeout=300)  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("whale: error: ") and "No space left on device" in lines[0]
    assert str(out) in lines[0]
