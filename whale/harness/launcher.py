"""The OS layers of a sandbox worker, applied before the worker's own Python starts.

Run as `python -s -S -m whale.harness.launcher '<settings json>' -- <worker arguments>`. In order: death
with the parent, a network namespace of its own, Landlock (reads of exactly the files the worker's Python
loads, found once per parent by a probe; no writes; no TCP), the switch to nobody for root, the
parent-death signal again (a change of credentials clears it), and the seccomp filter. Then it replaces
itself with a fresh Python that runs the worker and never imports ctypes, so no foreign-function
interface is left for a harness to find, whatever it walks. The filter refuses execve except for the one
call made here, which carries a random key in a register execve does not read: after it, no program
can be started.

The worker's Python reads its interpreter, standard library and whale through directory descriptors
opened here (paths like /proc/self/fd/5/lib/python3.11), so a worker switched to nobody still starts when
Python lives where nobody may not go (root's 0700 home).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import sys

from whale.harness import landlock, seccomp

TYPE_CHECKING = False  # typing itself is not imported: every worker start pays for what this imports
if TYPE_CHECKING:
    from typing import Any

NOBODY = 65534
CLONE_NEWNET = 0x40000000
SWITCHES = ("WHALE_LANDLOCK", "WHALE_SECCOMP", "WHALE_NETNS")  # "off" disables a layer (for measurement)
WHALE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))  # holds `whale`
SYS_EXECVE = 59


def worker_command(memory_mb: int, cpu_s: int, one_shot: bool = False) -> tuple[list[str], dict[str, str]]:
    """Parent side: the command and environment that start one sandbox worker (`--exec`: one snippet)."""
    worker = [str(memory_mb), str(cpu_s), *(["--exec"] if one_shot else [])]
    return _command({"read": list(loaded_files()), "parent_pid": os.getpid()}, worker)


def _command(settings: dict[str, Any], worker: list[str]) -> tuple[list[str], dict[str, str]]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": WHALE_ROOT}
    for switch in SWITCHES:
        if os.environ.get(switch):
            env[switch] = os.environ[switch]
    launcher = [sys.executable, "-s", "-S", "-m", "whale.harness.launcher", json.dumps(settings)]
    return [*launcher, "--", *worker], env


@functools.cache
def loaded_files() -> tuple[str, ...]:
    """What a worker's Python reads while it starts (its binary and libraries, each module and its cached
    bytecode): asked once per process of a worker started without any layer, which prints it and exits."""
    import subprocess  # parent side only, and a worker start need not import it

    argv, env = _command({"probe": True, "parent_pid": os.getpid()}, ["--probe"])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd="/")
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise RuntimeError(f"the sandbox worker's start-up probe failed: {tail[0][:300]}")
    return tuple(json.loads(done.stdout))


def die_with_parent(parent: int) -> None:
    """Have Linux SIGKILL this process when the parent dies (even by kill -9): no harness outlives a run."""
    ctypes.CDLL(None, use_errno=True).prctl(landlock.PR_SET_PDEATHSIG, 9, 0, 0, 0)
    if parent and os.getppid() != parent:
        raise SystemExit(125)  # the parent is already gone


def open_roots() -> dict[str, int]:
    """Descriptors of the folders the worker's Python starts from, kept open across exec."""
    roots = {
        "home": os.path.realpath(sys.base_prefix),
        "bin": os.path.dirname(os.path.realpath(sys.executable)),
        "whale": WHALE_ROOT,
    }
    fds = {name: os.open(path, os.O_RDONLY | os.O_DIRECTORY) for name, path in roots.items()}
    for fd in fds.values():
        os.set_inheritable(fd, True)
    return fds


def worker_exec(fds: dict[str, int], worker: list[str], status: dict) -> tuple[str, list[str], dict]:
    """The program, arguments and environment of the worker's Python, reached through `fds`."""
    exe = f"/proc/self/fd/{fds['bin']}/{os.path.basename(os.path.realpath(sys.executable))}"
    home = f"/proc/self/fd/{fds['home']}"
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONHOME": home,
        "PYTHONPATH": f"/proc/self/fd/{fds['whale']}",
        "LD_LIBRARY_PATH": f"{home}/lib",  # a libpython found by an absolute RUNPATH nobody cannot enter
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "WHALE_PARENT_PID": str(os.getppid()),
        "WHALE_ROOT_FDS": ",".join(str(fd) for fd in fds.values()),
        "WHALE_SANDBOX": json.dumps(status),
    }
    return exe, [exe, "-s", "-S", "-P", "-m", "whale.harness.worker", *worker], env


def isolate_network() -> str:
    """A network namespace of the process's own, whose only interface is a loopback that is down: no
    address anywhere is reachable. Returns what went wrong ("" when nothing)."""
    if os.environ.get("WHALE_NETNS", "on") == "off":
        return "network namespace disabled by WHALE_NETNS=off"
    problem = landlock.unshare(CLONE_NEWNET)
    return f"no network namespace of its own ({problem})" if problem else ""


def restrict_files(read: list[str] | tuple[str, ...], status: dict[str, Any]) -> None:
    """Landlock: reads of `read` only (files, and folders to list) and /dev/null, no writes elsewhere;
    then no TCP."""
    if os.environ.get("WHALE_LANDLOCK", "on") == "off":
        status["problems"].append("Landlock disabled by WHALE_LANDLOCK=off")
        return
    try:
        files = [p for p in read if not os.path.isdir(p)]
        folders = [p for p in read if os.path.isdir(p)]
        status["landlock"] = landlock.restrict(files, [], ["/dev/null"], listable=folders)
        status["filesystem"] = True
        if status["landlock"] >= 4:
            landlock.restrict_network(status["landlock"])
            status["network"] = True
        else:
            status["problems"].append(f"Landlock ABI {status['landlock']} < 4: TCP is not restricted")
    except OSError as exc:
        status["problems"].append(f"Landlock not applied: {exc}")


def become_nobody(parent: int, status: dict[str, Any]) -> None:
    """Root gives up its privileges: rlimits bind (RLIMIT_NPROC does not bind root), file modes apply."""
    if os.geteuid() == 0:
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        except OSError as exc:
            status["problems"].append(f"still root (RLIMIT_NPROC does not bind root): {exc}")
        die_with_parent(parent)
    status["uid"] = os.geteuid()


def install_filter(status: dict[str, Any]) -> int:
    """The seccomp filter, with one execve allowed: the one that carries the returned key."""
    if os.environ.get("WHALE_SECCOMP", "on") == "off":
        status["problems"].append("seccomp disabled by WHALE_SECCOMP=off")
        return 0
    key = int.from_bytes(os.urandom(8), "little") | 1
    try:
        seccomp.install(exec_key=key)
        status["seccomp"] = True
        return key
    except (OSError, RuntimeError) as exc:
        status["problems"].append(f"seccomp not applied: {exc}")
        return 0


def execute(exe: str, argv: list[str], env: dict[str, str], key: int) -> None:
    """execve(2) with `key` in its fourth argument register, which the kernel ignores and the filter reads."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    args = (ctypes.c_char_p * (len(argv) + 1))(*(a.encode() for a in argv), None)
    environ = (ctypes.c_char_p * (len(env) + 1))(*(f"{k}={v}".encode() for k, v in env.items()), None)
    libc.syscall(ctypes.c_long(SYS_EXECVE), exe.encode(), args, environ, ctypes.c_ulong(key))
    print(f"whale launcher: cannot start the worker: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
    raise SystemExit(127)


def apply_layers(read: list[str] | tuple[str, ...], parent: int) -> tuple[dict[str, Any], int]:
    """Every OS layer, in order, on this process; returns the status the worker reports and the exec key."""
    status: dict[str, Any] = {"landlock": 0, "filesystem": False, "network": False, "seccomp": False}
    problem = isolate_network()
    status["netns"], status["problems"] = not problem, [problem] if problem else []
    restrict_files(read, status)
    become_nobody(parent, status)
    return status, install_filter(status)


def main(argv: list[str]) -> None:
    settings, worker = json.loads(argv[0]), argv[2:]
    parent = int(settings.get("parent_pid") or 0)
    die_with_parent(parent)
    fds = open_roots()
    if settings.get("probe"):
        execute(*worker_exec(fds, worker, {}), 0)
    status, key = apply_layers(settings.get("read", []), parent)
    execute(*worker_exec(fds, worker, status), key)


if __name__ == "__main__":
    main(sys.argv[1:])
