"""Run model-written Python (the math `python` tool) in a fresh sandbox process; return what it printed.

Same layers as harness workers (static checks, Landlock, restricted builtins, module proxies, audit hook,
rlimits), plus a wall-clock kill of the whole process group and a cap on what the process may send
back. Every failure is a ToolError the model can read; nothing here can crash the run. A sandbox layer
the process could not apply is reported once on stderr (see worker.report_degraded).
"""

from __future__ import annotations

import json
import os
import select
import signal
import struct
import subprocess
import time
from typing import Any

from whale.harness import validate
from whale.harness.confine import report_degraded, sandbox_status_problems
from whale.harness.launcher import worker_command
from whale.harness.task import ToolError
from whale.harness.worker import MAX_FRAME

MAX_OUTPUT = 4000


def run_python(code: str, timeout_s: float = 5.0, memory_mb: int = 256, cpu_s: int = 5) -> str:
    if not isinstance(code, str) or not code.strip():
        raise ToolError("python expects a non-empty string of code")
    problems = validate.code_problems(code)
    if problems:
        raise ToolError(f"code refused: {problems[0]}")
    cmd, env = worker_command(memory_mb, cpu_s, one_shot=True)
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        start_new_session=True, env=env, cwd="/",
    )  # fmt: skip
    data = json.dumps({"code": code}).encode()
    try:
        out = _exchange(proc, struct.pack(">I", len(data)) + data, time.monotonic() + timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
    if out is None:
        raise ToolError(f"timeout: the code ran over {timeout_s:g}s")
    if len(out) > 4 + MAX_FRAME:
        raise ToolError("output too large: the code's process sent more than 4 MiB")
    if len(out) < 4:
        raise ToolError(f"the code crashed its process (exit status {proc.returncode})")
    result = _result(out)
    report_degraded(sandbox_status_problems(result.get("sandbox")), "python tool snippets")
    stdout = result["stdout"][:MAX_OUTPUT]
    if result["error"]:
        raise ToolError(f"{result['error']}" + (f"\nprinted before the error:\n{stdout}" if stdout else ""))
    return stdout


def _exchange(proc: subprocess.Popen, request: bytes, deadline: float) -> bytes | None:
    """Send the request, read until the process closes its stdout; None on timeout. Stops reading just
    past one maximal frame, so a process that floods its pipe costs the parent no memory."""
    try:
        proc.stdin.write(request)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass  # the process died before reading: its empty output says so
    out = bytearray()
    fd = proc.stdout.fileno()
    while len(out) <= 4 + MAX_FRAME:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        out += chunk
    return bytes(out)


def _result(out: bytes) -> dict[str, Any]:
    (size,) = struct.unpack(">I", out[:4])
    try:
        result = json.loads(out[4 : 4 + size])
    except ValueError:
        result = None
    if not (isinstance(result, dict) and isinstance(result.get("stdout"), str)):
        raise ToolError("protocol: the code's process sent a malformed reply")
    if result.get("error") is not None and not isinstance(result["error"], str):
        raise ToolError("protocol: the code's process sent a malformed reply")
    return result
