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
import ctypes, errno, json, os, sys, time
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
pid, parent = os.getpid(), os.getppid()
harmless = {  # arguments that do nothing, or fail with another errno, should the call be let through
    "kill": (parent, 0), "tkill": (pid, 0), "tgkill": (pid, pid, 0), "ptrace": (16, parent),
    "clone": (0x10000,), "unshare": (0,), "execveat": (-1,), "pidfd_open": (parent, 0),
    "process_vm_readv": (parent,), "process_vm_writev": (parent,), "io_uring_setup": (8,),
}
fd = os.open(sys.argv[1], os.O_RDONLY)
seccomp.install()
for name, nr in seccomp.NEVER.items():
    if name == "fork":
        attempt(name, lambda: None if os.fork() else os._exit(0))
    elif name == "execve":
        attempt(name, lambda: os.execv("/bin/true", ["true"]))
    elif name != "vfork":
        attempt(name, raw(nr, *harmless.get(name, (-1,))))
unlisted = {"mkdir": 83, "chmod": 90, "setuid": 105, "prctl": 157, "pipe2": 293, "x32 getpid": 0x40000027}
for name, nr in unlisted.items():
    attempt("unlisted " + name, raw(nr, 0, 0))
attempt("ioctl TIOCSTI", raw(16, 0, 0x5412, 0))
attempt("ioctl FIONREAD", raw(16, 0, 0x541B, 0))
ordinary = {
    "read a file": lambda: open(sys.argv[1]).read() and None,
    "read an open descriptor": lambda: os.pread(fd, 5, 0) and None,
    "allocate": lambda: bytearray(50_000_000) and None,
    "sleep": lambda: time.sleep(0.01),
    "clocks": lambda: time.process_time() + time.thread_time() + time.monotonic() and None,
    "isatty": lambda: os.isatty(0) and None,
    "close-on-exec": lambda: os.set_inheritable(fd, True),
    "facts": lambda: (os.uname(), os.getpid(), os.getuid(), os.times(), os.cpu_count()) and None,
    "limits": lambda: __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE) and None,
}
for name, fn in ordinary.items():
    attempt("ordinary " + name, fn)
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
    ordinary = {name: result for name, result in out.items() if name.startswith("ordinary ")}
    assert len(ordinary) == 9 and set(ordinary.values()) == {"ok"}, ordinary
    refused = {name: result for name, result in out.items() if name not in ordinary}
    assert len(refused) == len(seccomp.NEVER) - 1 + 8 and set(refused.values()) == {"EPERM"}, refused


def evaluate(code: list[tuple[int, int, int, int]], nr: int, args=(0,) * 6, arch=seccomp.AUDIT_ARCH_X86_64):
    """Run the classic-BPF program on one seccomp_data record, as the kernel would; returns its action."""
    words = {0: nr, 4: arch}
    for i, value in enumerate(args):
        words[16 + 8 * i], words[20 + 8 * i] = value & 0xFFFFFFFF, value >> 32
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == seccomp.RET_K:
            return k
        if op == seccomp.LD_W_ABS:
            acc, pc = words[k], pc + 1
        else:
            taken = acc == k if op == seccomp.JEQ_K else acc >= k
            pc += 1 + (jt if taken else jf)


def test_the_program_allows_exactly_the_listed_calls_and_refuses_every_other_number():
    key = 0xDEADBEEF12345677
    code = seccomp.program(sorted(seccomp.ALLOWED.values()), key, sorted(seccomp.IOCTL_REQUESTS.values()))
    allow, deny = seccomp.RET_ALLOW, seccomp.RET_ERRNO | seccomp.EPERM
    assert not set(seccomp.ALLOWED) & set(seccomp.NEVER)
    for nr in range(512):
        expected = allow if nr in seccomp.ALLOWED.values() and nr != 16 else deny
        assert evaluate(code, nr) == expected, nr
    assert evaluate(code, 39 | seccomp.X32_SYSCALL_BIT) == deny
    assert evaluate(code, 39, arch=0x40000003) == seccomp.RET_KILL_PROCESS  # i386
    for request in (0x5401, 0x5450, 0x5451, 0xFFFFFFFF00005401):  # the kernel reads the low 32 bits
        assert evaluate(code, 16, (0, request)) == allow
    for request in (0x5412, 0x541B, 0x5402, 0x5401 << 1):
        assert evaluate(code, 16, (0, request)) == deny
    assert evaluate(code, 59, (0, 0, 0, key)) == allow
    for wrong in (0, key ^ 1, key ^ (1 << 40), key & 0xFFFFFFFF):
        assert evaluate(code, 59, (0, 0, 0, wrong)) == deny
    assert evaluate(seccomp.program([39]), 59, (0, 0, 0, key)) == deny  # no key: no execve at all


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
