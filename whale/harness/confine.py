"""The sandbox's OS layers, applied by a worker to itself after its imports: rlimits, a network namespace
of its own, Landlock (files, then network), the switch to nobody, death with the parent, a seccomp
filter (seccomp.py: no sockets, no new programs or processes, no tracing), and the audit hook that
refuses system access once harness code may run."""

from __future__ import annotations

import ctypes
import os
import resource
import string
import sys
from typing import Any

from whale.harness import seccomp

NOBODY = 65534
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
SWITCHES = ("WHALE_LANDLOCK", "WHALE_SECCOMP", "WHALE_NETNS")  # "off" disables a layer (for measurement)


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


def die_with_parent() -> None:
    """Have Linux SIGKILL this worker when the parent dies (even by kill -9): no harness outlives a run."""
    parent = int(os.environ.get("WHALE_PARENT_PID", "0"))
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    if parent and os.getppid() != parent:
        raise SystemExit(0)  # the parent is already gone


def isolate_network() -> str:
    """Move the worker into a network namespace of its own, whose only interface is a loopback that is
    down: no address anywhere is reachable, whatever gets past the other layers. Root may create one;
    others need a user namespace with it. Returns what went wrong ("" when nothing)."""
    libc = ctypes.CDLL(None, use_errno=True)
    flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET
    if libc.unshare(flags) != 0:
        return f"no network namespace of its own (unshare: {os.strerror(ctypes.get_errno())})"
    return ""


def readable_paths() -> list[str]:
    """What the worker may still read: the standard library, and each other module file already loaded."""
    stdlib = os.path.dirname(string.__file__)
    paths = {stdlib}
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__file__", None)
        if isinstance(path, str) and not path.startswith(stdlib + os.sep):
            paths.add(path)
    return sorted(paths)


def confine() -> dict[str, Any]:
    """The OS layers: Landlock (filesystem, then network) and, for root, a switch to nobody. Returns the
    status the hello frame carries; `problems` lists what could not be applied."""
    status: dict[str, Any] = {"landlock": 0, "filesystem": False, "network": False, "problems": []}
    off = os.environ.get("WHALE_NETNS", "on") == "off"
    problem = "network namespace disabled by WHALE_NETNS=off" if off else isolate_network()
    status["netns"] = not problem
    if problem:
        status["problems"].append(problem)
    if os.environ.get("WHALE_LANDLOCK", "on") == "off":
        status["problems"].append("Landlock disabled by WHALE_LANDLOCK=off")
    else:
        try:
            from whale.harness import landlock

            status["landlock"] = landlock.restrict(readable_paths(), [], [])
            status["filesystem"] = True
            if status["landlock"] >= 4:
                landlock.restrict_network(status["landlock"])
                status["network"] = True
            else:
                status["problems"].append(f"Landlock ABI {status['landlock']} < 4: TCP is not restricted")
        except (OSError, ImportError, AttributeError) as exc:
            status["problems"].append(f"Landlock not applied: {exc}")
    if os.geteuid() == 0:
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        except OSError as exc:
            status["problems"].append(f"still root (RLIMIT_NPROC does not bind root): {exc}")
        die_with_parent()  # a change of credentials clears the parent-death signal: set it again
    status["uid"] = os.geteuid()
    status["seccomp"] = False
    if os.environ.get("WHALE_SECCOMP", "on") == "off":
        status["problems"].append("seccomp disabled by WHALE_SECCOMP=off")
    else:
        try:
            seccomp.install()  # last: the switch to nobody above needs calls it may refuse
            status["seccomp"] = True
        except (OSError, RuntimeError, AttributeError) as exc:
            status["problems"].append(f"seccomp not applied: {exc}")
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
