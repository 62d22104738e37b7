"""The launcher: what the worker's Python may read once the OS layers are on, and how it starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from whale.harness import landlock, launcher

ROOT = Path(__file__).resolve().parents[2]

LAYERED = """
import json, os, sys
from whale.harness import launcher
files = launcher.loaded_files()
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as exc:
        out[name] = type(exc).__name__
# through a descriptor opened before the layers, as the worker does: nobody may not enter root's home
stdlib = "/proc/self/fd/" + str(os.open(os.path.dirname(os.__file__), os.O_RDONLY | os.O_DIRECTORY))
status, _ = launcher.apply_layers(files, 0)
out = {"status": status}
attempt("read a startup file", lambda: open(stdlib + "/json/__init__.py").read())
attempt("read ctypes", lambda: open(stdlib + "/ctypes/__init__.py").read())
attempt("read another module", lambda: open(stdlib + "/socket.py").read())
attempt("read /etc/passwd", lambda: open("/etc/passwd").read())
attempt("list the standard library", lambda: os.listdir(stdlib))
attempt("write /dev/null", lambda: open("/dev/null", "w").write("x"))
print(json.dumps(out))
"""


def test_the_probe_lists_what_the_worker_loads_and_nothing_of_ctypes() -> None:
    files = launcher.loaded_files()
    assert os.path.realpath(sys.executable) in files
    assert any(f.endswith("/whale/harness/worker.py") for f in files)
    assert any(f.endswith("/json/__init__.py") for f in files)  # a preloaded module of the harness
    assert not [f for f in files if "ctypes" in f or "ffi" in os.path.basename(f)]
    assert all(os.path.exists(f) for f in files)


def layered(landlock_setting: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-s", "-c", LAYERED], capture_output=True, text=True, timeout=60, cwd="/",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "WHALE_SECCOMP": "off",
             "WHALE_LANDLOCK": landlock_setting},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(landlock.abi_version() < 1, reason="Landlock is not available on this kernel")
def test_after_the_layers_only_the_files_the_worker_started_from_are_readable() -> None:
    out, free = layered("on"), layered("off")
    assert out["status"]["filesystem"] is True, out["status"]
    assert (out["read a startup file"], out["list the standard library"], out["write /dev/null"]) == (
        "ok",
    ) * 3
    assert (out["read ctypes"], out["read another module"]) == ("PermissionError",) * 2
    assert out["read /etc/passwd"] == "PermissionError"
    assert (free["read ctypes"], free["read another module"]) == ("ok", "ok")  # Landlock, not file modes


def test_a_worker_whose_parent_is_gone_does_not_start() -> None:
    argv, env = launcher.worker_command(256, 5)
    settings = json.loads(argv[argv.index("--") - 1])
    argv[argv.index("--") - 1] = json.dumps({**settings, "parent_pid": 1})  # not our parent
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60, cwd="/")
    assert done.returncode == 125 and done.stdout == b""


def test_a_worker_start_imports_only_what_the_launcher_needs() -> None:
    """Every rollout of a new candidate or split starts a worker, and each start runs the launcher's
    imports in a fresh interpreter: the parent-side helpers (subprocess) and typing stay out of it."""
    code = "import sys, whale.harness.launcher; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-s", "-S", "-P", "-c", code], capture_output=True, text=True, timeout=60, cwd="/",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert "whale.harness.seccomp" in loaded and "ctypes" in loaded
    assert not loaded & {"subprocess", "typing", "secrets", "pathlib", "platform", "hashlib"}
