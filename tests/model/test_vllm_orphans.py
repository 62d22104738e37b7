"""vLLM's engine-core process survived a SIGKILLed whale process (checked by hand on the embedded model:
orphaned to init, still using a core a minute later; with the guard gone within 6 s). Here the guard
itself, in a real process chain without vLLM: a child that a whale engine would have started ends once
its parent is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from whale.model.vllm_orphans import OWNER, guard

PARENT = """
import os, subprocess, sys, time
env = {**os.environ, "WHALE_VLLM_OWNER": str(os.getpid())}
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env=env)
print(child.pid, flush=True)
time.sleep(600)
"""
CHILD = "from whale.model.vllm_orphans import guard; import time; guard(); time.sleep(600)"


def running(pid: int) -> bool:
    """Alive and not a zombie (init here need not reap the orphan at once)."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_process_a_whale_engine_started_ends_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        time.sleep(2)  # the child is up and watching
        assert running(child)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 15
        while running(child) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not running(child), "the child outlived its parent"
    finally:
        if running(child):
            os.kill(child, signal.SIGKILL)


def test_the_guard_watches_only_processes_a_whale_engine_started(monkeypatch):
    def guards() -> int:
        return sum(t.name == "whale-orphan-guard" for t in threading.enumerate())

    before = guards()
    monkeypatch.delenv(OWNER, raising=False)
    guard()  # any vLLM process not started by whale
    monkeypatch.setenv(OWNER, str(os.getpid()))
    guard()  # the whale process itself, where vLLM loads its plugins too
    assert guards() == before


def test_vllm_finds_the_guard_among_its_plugins():
    found = [e for e in entry_points(group="vllm.general_plugins") if e.name == "whale_orphan_guard"]
    assert [e.load() for e in found] == [guard]
