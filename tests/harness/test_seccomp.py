"""The seccomp filter, installed in a real process: each refused syscall fails with EPERM, and what a
harness legitimately needs still works."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from whale.harness import seccomp

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import ctypes, errno, json, os, socket, sys
from whale.harness import seccomp
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {}
def attempt(name, fn):
    try:
        result = fn()
        out[name] = "ok" if result is None or result >= 0 else errno.errorcode[ctypes.get_errno()]
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
def raw(nr, *args):
    return lambda: libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
seccomp.install()
attempt("socket AF_INET", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM) and None)
attempt("socket AF_UNIX", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) and None)
attempt("socket AF_NETLINK", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW) and None)
attempt("socketpair", lambda: socket.socketpair() and None)
attempt("fork", lambda: os.fork() and None)
attempt("execve", lambda: os.execv("/bin/true", ["true"]))
attempt("ptrace", raw(101, 16, os.getppid(), 0, 0))  # PTRACE_ATTACH to the parent
attempt("process_vm_readv", raw(310, os.getppid(), 0, 0, 0, 0, 0))
attempt("unshare", raw(272, 0x40000000))  # CLONE_NEWNET
attempt("bpf", raw(321, 0, 0, 0))
attempt("io_uring_setup", raw(425, 8, 0))
attempt("x32 getpid", raw(0x40000000 | 39))
attempt("clone3", raw(435, 0, 0))
attempt("read a file", lambda: open(sys.argv[1]).read() and None)
attempt("getpid", raw(39))
attempt("allocate", lambda: bytearray(50_000_000) and None)
print(json.dumps(out))
"""


@pytest.mark.skipif(not seccomp.supported(), reason="the filter is written for x86-64 Linux")
def test_each_refused_syscall_fails_with_eperm_and_ordinary_work_goes_on(tmp_path):
    readable = tmp_path / "data.txt"
    readable.write_text("plain data")
    done = subprocess.run(
        [sys.executable, "-s", "-c", PROBE, str(readable)], capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, cwd="/",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    ok = ("read a file", "getpid", "allocate")
    assert {name: out[name] for name in ok} == dict.fromkeys(ok, "ok")
    refused = {name: result for name, result in out.items() if name not in ok}
    assert len(refused) == 13 and set(refused.values()) == {"EPERM"}, refused


def test_the_program_checks_the_architecture_then_refuses_each_listed_number():
    code = seccomp.program([41, 59])
    assert code[:3] == [(0x20, 0, 0, 4), (0x15, 1, 0, seccomp.AUDIT_ARCH_X86_64), (0x06, 0, 0, 0x80000000)]
    assert code[-2:] == [(0x06, 0, 0, seccomp.RET_ALLOW), (0x06, 0, 0, seccomp.RET_ERRNO | 1)]
    deny = len(code) - 1
    for i, (op, jt, jf, _k) in enumerate(code[4:-2], start=4):  # every check jumps to the deny return
        assert op in (0x15, 0x35) and i + 1 + jt == deny and jf == 0
    assert {"socket", "connect", "sendto", "ptrace", "process_vm_readv", "execve", "fork"} <= set(
        seccomp.DENIED
    )


KEYED = """
import errno, os, sys
from whale.harness import launcher, seccomp
seccomp.install(exec_key=0xDEADBEEF12345677)
try:
    os.execv("/bin/true", ["true"])
except OSError as exc:
    print("plain execve:", errno.errorcode[exc.errno], flush=True)
key = int(sys.argv[1], 16)
launcher.execute("/bin/sh", ["sh", "-c", "echo started; exec /bin/true"], {"PATH": "/bin"}, key)
"""


@pytest.mark.skipif(not seccomp.supported(), reason="the filter is written for x86-64 Linux")
@pytest.mark.parametrize("key", ["DEADBEEF12345677", "DEADBEEF12345676", "1EADBEEF12345677"])
def test_only_the_execve_that_carries_the_key_starts_a_program_and_that_program_cannot_start_another(key):
    done = subprocess.run(
        [sys.executable, "-s", "-c", KEYED, key], capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, cwd="/",
    )  # fmt: skip
    assert done.stdout.startswith("plain execve: EPERM\n"), done.stdout + done.stderr
    if key == "DEADBEEF12345677":  # the shell started, and its own exec was refused
        assert done.stdout.endswith("started\n") and done.returncode != 0
        assert "Operation not permitted" in done.stderr
    else:  # one bit off in either half: refused like any other execve
        assert "started" not in done.stdout and done.returncode == 127
        assert "cannot start the worker: Operation not permitted" in done.stderr
