"""Run model-written Python (the math `python` tool) in a fresh sandbox process; return what it printed.

Same layers as harness workers (static checks, restricted builtins, module proxies, audit hook,
rlimits), plus a wall-clock kill of the whole process group. Every failure is a ToolError the model
can read; nothing here can crash the run.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

from whale.domains.base import ToolError
from whale.harness import validate

MAX_OUTPUT = 4000


def run_python(code: str, timeout_s: float = 5.0, memory_mb: int = 256, cpu_s: int = 5) -> str:
    if not isinstance(code, str) or not code.strip():
        raise ToolError("python expects a non-empty string of code")
    problems = validate.code_problems(code)
    if problems:
        raise ToolError(f"code refused: {problems[0]}")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "WHALE_PARENT_PID": str(os.getpid()),
    }
    cmd = [sys.executable, "-s", "-m", "whale.harness.worker", str(memory_mb), str(cpu_s), "--exec"]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        start_new_session=True, env=env, cwd="/",
    )  # fmt: skip
    data = json.dumps({"code": code}).encode()
    try:
        out, _ = proc.communicate(struct.pack(">I", len(data)) + data, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ToolError(f"timeout: the code ran over {timeout_s:g}s") from None
    if len(out) < 4:
        raise ToolError(f"the code crashed its process (exit status {proc.returncode})")
    (size,) = struct.unpack(">I", out[:4])
    result = json.loads(out[4 : 4 + size])
    stdout = result["stdout"][:MAX_OUTPUT]
    if result["error"]:
        raise ToolError(f"{result['error']}" + (f"\nprinted before the error:\n{stdout}" if stdout else ""))
    return stdout
