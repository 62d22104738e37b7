"""`whale` commands for the tests, each forked from one warm interpreter.

A command still runs in a process of its own, with its own arguments, output files and exit code, as
`python -m whale.cli` would. Only the interpreter's start-up and imports (torch and transformers: 7-10 s
on 2 cores) are paid once per test worker instead of once per command. The warm process imports
modules and nothing else: no thread is running and no torch operation has run when it forks.

Protocol on the server's stdin/stdout, one JSON line each: {"args", "stdout", "stderr", "cwd"} in; {"pid"}
when the command has started, then {"code"} when it has ended.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

WARM = (
    "torch", "transformers.modeling_utils", "whale.cli.main", "whale.run.experiment", "whale.studies.compare",
)  # fmt: skip


def serve() -> None:
    """The warm process: import, then fork one child per request and report its exit code."""
    import importlib

    for name in WARM:
        importlib.import_module(name)
    assert threading.active_count() == 1, "a thread is running: forking would copy its locks"
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            run_child(request)
        replies.write(json.dumps({"pid": pid}).encode() + b"\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
        replies.flush()


def run_child(request: dict[str, Any]) -> None:
    """In the forked child: become `python -m whale.cli <args>` with its output in the given files, and
    end as that interpreter would (its threads joined, its exit handlers run, its output flushed), but
    without tearing down torch's modules one by one, which takes longer than the command itself."""
    code = 1
    try:
        os.setpgid(0, 0)
        os.chdir(request["cwd"])
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.argv = [f"{sys.executable} -m whale.cli", *request["args"]]
        from whale.cli.main import main

        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if not isinstance(exc.code, int | None):
                print(exc.code, file=sys.stderr)
        threading._shutdown()  # what the interpreter does at exit: join the non-daemon threads
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


class Zygote:
    """The client: one warm server per test process, started on first use."""

    def __init__(self, env: dict[str, str]):
        root = Path(__file__).resolve().parents[1]
        path = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tests.zygote import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**env, "PYTHONPATH": path},
        )  # fmt: skip

    def run(self, args: list[str], out_dir: Path, timeout: float) -> subprocess.CompletedProcess:
        out, err = out_dir / "stdout", out_dir / "stderr"
        request = {"args": list(args), "stdout": str(out), "stderr": str(err), "cwd": os.getcwd()}
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        started = self.reply(timeout=600)  # the first request waits for the imports
        try:
            code = self.reply(timeout=timeout)["code"]
        except subprocess.TimeoutExpired:
            os.killpg(started["pid"], 9)
            self.reply(timeout=60)
            raise
        return subprocess.CompletedProcess(
            ["whale", *args], code, out.read_text(errors="replace"), err.read_text(errors="replace")
        )

    def reply(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired("whale", timeout)
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                line = self.proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"the warm whale process died (exit {self.proc.wait()})")
                return json.loads(line)
