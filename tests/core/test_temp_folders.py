"""A process's temp folders go with it: on close, when dropped, at exit, and after a kill -9 at the latest
when the next process makes one."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from whale.core.temp_folders import OwnedTempFolder

PREFIX = "whale-test-"
MAKE_FOLDER = (
    "from whale.core.temp_folders import OwnedTempFolder\n"
    f"folder = OwnedTempFolder({PREFIX!r})\nprint(folder.path)\n"
)
KILL_SELF = "import os, sys\nprint(os.getpid())\nsys.stdout.flush()\nos.kill(os.getpid(), 9)\n"


def in_process(script: str, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp)}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture
def temp_root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_temp_folder_is_removed_on_close_and_when_dropped(temp_root):
    folder = OwnedTempFolder(PREFIX)
    (folder.path / "inside").mkdir()
    assert folder.path.parent == temp_root and folder.path.name.startswith(PREFIX)
    folder.close()
    assert not folder.path.exists()
    dropped = OwnedTempFolder(PREFIX).path
    gc.collect()
    assert not dropped.exists()


def test_a_process_removes_its_temp_folder_at_exit_but_not_a_forked_child(temp_root):
    script = MAKE_FOLDER + (
        "import os, sys\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    sys.exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print(folder.path.is_dir())\n"
    )
    done = in_process(script, temp_root)
    path, after_child = done.stdout.split()
    assert done.returncode == 0, done.stderr
    assert after_child == "True" and not Path(path).exists()


def test_a_killed_process_leaves_its_folder_and_the_next_one_removes_it(temp_root):
    killed = in_process(MAKE_FOLDER + KILL_SELF, temp_root)
    orphan, dead_pid = Path(killed.stdout.split()[0]), killed.stdout.split()[1]
    assert killed.returncode == -9 and orphan.is_dir()
    (temp_root / f"{PREFIX}foreign").mkdir()
    (temp_root / f"{PREFIX}foreign" / "owner").write_text(f"another-host {dead_pid}")
    (temp_root / f"{PREFIX}old").mkdir()  # no owner file: not whale's to judge
    (temp_root / "whale-other-x").mkdir()  # another prefix: not this kind's to judge
    (temp_root / "whale-other-x" / "owner").write_text(f"{socket.gethostname()} {dead_pid}")
    live = OwnedTempFolder(PREFIX)
    (temp_root / f"{PREFIX}live").mkdir()
    (temp_root / f"{PREFIX}live" / "owner").write_text(f"{socket.gethostname()} {os.getpid()}")
    OwnedTempFolder(PREFIX)
    assert not orphan.exists()
    assert live.path.is_dir() and (temp_root / f"{PREFIX}live").is_dir()
    assert (temp_root / f"{PREFIX}foreign").is_dir() and (temp_root / f"{PREFIX}old").is_dir()
    assert (temp_root / "whale-other-x").is_dir()
