"""The sandbox layers a worker applies to itself after its imports (rlimits, and the audit hook that
refuses system access once harness code may run), and the parent's reading of the sandbox status a worker
reports. The OS layers before them (a network namespace, Landlock, nobody, seccomp) are the launcher's:
they are applied before the worker's Python starts, so the worker never loads ctypes (launcher.py)."""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any


def limit_resources(memory_mb: int, cpu_s: int, highest_fd: int) -> None:
    """OS limits the worker sets on itself after its imports: memory, CPU, no new files or processes."""
    soft_hard = [
        (resource.RLIMIT_AS, memory_mb << 20, memory_mb << 20),
        # SIGXCPU at the soft limit (a recognisable exit), SIGKILL a second later at the hard one.
        (resource.RLIMIT_CPU, cpu_s, cpu_s + 1),
        (resource.RLIMIT_FSIZE, 0, 0),
        (resource.RLIMIT_NPROC, 0, 0),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_NOFILE, highest_fd + 1, highest_fd + 1),
    ]
    for which, soft, hard in soft_hard:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            pass


def forbid_system_access(event: str, args: tuple, _seen: list[str] = []) -> None:  # noqa: B006
    """Audit hook: once a harness may run, no file, process, socket, import, thread-state or frame event
    is allowed in this process, whatever path reached it. The rules are literals in this function's code
    (not globals a harness could rebind); `_seen` is the rollout's record (see make_runner)."""
    if event == "whale.refused":  # something the sandbox refused without raising here (an import)
        _seen.append(f"{args[0]}"[:200])
        return
    if event.startswith(
        (
            "open", "os.", "posix.", "shutil.", "subprocess.", "pty.", "socket.", "ssl.", "http.", "urllib.",
            "ftplib.", "smtplib.", "webbrowser.", "glob.", "tempfile.", "ctypes.", "mmap.", "fcntl.",
            "signal.", "resource.", "sqlite3.", "syslog.", "import", "code.__new__", "function.__new__",
            "object.__getattr__", "sys._getframe", "sys._current_frames", "sys._current_exceptions",
            "sys.addaudithook", "sys.settrace", "sys.setprofile", "sys.monitoring", "sys.remote_exec",
            "gc.", "marshal.", "pickle.", "cpython.", "builtins.input", "_thread.", "threading.",
        )
    ) or (
        event in ("object.__setattr__", "object.__delattr__")
        and args[1]
        in ("__code__", "__defaults__", "__kwdefaults__", "__class__", "__bases__", "__dict__", "__globals__")
    ):  # fmt: skip
        _seen.append(event)
        raise RuntimeError(f"forbidden operation in harness: {event}")


def startup_files() -> list[str]:
    """What this Python has loaded, by real path (its modules and their bytecode, what it has mapped, the
    folders on its path): the launcher's probe, so that Landlock lets a worker read exactly that."""
    files = {"/etc/ld.so.cache"}  # opened by the dynamic loader at start, closed afterwards
    for mod in list(sys.modules.values()):
        for attr in ("__file__", "__cached__"):
            path = getattr(mod, attr, None)
            if isinstance(path, str) and os.path.isfile(path):
                files.add(os.path.realpath(path))
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/"):
                files.add(os.path.realpath(fields[5].strip()))
    files.update(os.path.realpath(p) for p in sys.path if os.path.isdir(p))
    return sorted(files)


def launched_status() -> dict[str, Any]:
    """The sandbox status the launcher handed over, plus what the worker checks for itself."""
    try:
        status = json.loads(os.environ.get("WHALE_SANDBOX", ""))
    except ValueError:
        status = {"problems": ["the worker was not started by the launcher"]}
    if "_ctypes" in sys.modules:
        status.setdefault("problems", []).append("ctypes is loaded in the worker")
    status["ctypes"] = "_ctypes" in sys.modules
    return status


def sandbox_status_problems(status: Any) -> list[str]:
    """Parent side: what a worker's sandbox status says is missing."""
    if not isinstance(status, dict):
        return ["the worker reported no sandbox status"]
    return [str(p)[:300] for p in status.get("problems") or []][:10]


_REPORTED: set[tuple[str, str]] = set()


def report_degraded(problems: list[str], who: str) -> None:
    """Parent side: say once per process, on stderr, which sandbox layer a worker could not apply."""
    for problem in problems:
        if (who, problem) not in _REPORTED:
            _REPORTED.add((who, problem))
            print(f"whale: warning: {who} run with a weaker sandbox: {problem}", file=sys.stderr, flush=True)
