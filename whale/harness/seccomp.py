"""A seccomp-bpf allowlist the worker launcher installs before it starts the worker's Python: the OS wall
behind the Python layers. A worker may make only the calls a Python interpreter needs to start, read the
files Landlock lets it read, talk on the pipes it was given and manage its own memory, time and signals.
Every other call fails with EPERM (an ordinary PermissionError in a harness), so a harness that gets
around every Python-level check still cannot open a socket of any family, start a program, fork, trace
or read another process, signal anyone, or reach the kernel's rarer surface (bpf, io_uring, namespaces,
keyrings, module loading). ioctl is allowed only for the three requests CPython makes (is this a
terminal, close-on-exec on and off), so no terminal can be driven.

The allowlist was recorded with strace over the hostile, worker, runner and domain test suites (every
call a confined worker made after the filter went in), plus the clocks, sleeps and memory calls that the
recorded runs reached through the vDSO or did not happen to need. It is written as classic BPF for
x86-64 (no libseccomp binding needed: the launcher reaches prctl through ctypes anyway). Any other
architecture, and the x32 ABI, is killed outright.
"""

from __future__ import annotations

import ctypes
import os

Instruction = tuple[int, int, int, int]  # (code, jump if true, jump if false, k)

# x86-64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl)
ALLOWED = {
    # reading files (Landlock decides which) and the worker's pipes
    "read": 0, "write": 1, "open": 2, "close": 3, "stat": 4, "fstat": 5, "lstat": 6, "lseek": 8,
    "pread64": 17, "readv": 19, "writev": 20, "access": 21, "dup": 32, "dup2": 33, "fcntl": 72,
    "getcwd": 79, "readlink": 89, "getdents64": 217, "openat": 257, "newfstatat": 262, "readlinkat": 267,
    "faccessat": 269, "dup3": 292, "statx": 332, "faccessat2": 439,
    # memory
    "mmap": 9, "mprotect": 10, "munmap": 11, "brk": 12, "mremap": 25, "madvise": 28,
    # signals delivered to the process itself, and its signal stack
    "rt_sigaction": 13, "rt_sigprocmask": 14, "rt_sigreturn": 15, "sigaltstack": 131,
    # time and sleep
    "sched_yield": 24, "nanosleep": 35, "gettimeofday": 96, "getrusage": 98, "times": 100, "time": 201,
    "clock_gettime": 228, "clock_getres": 229, "clock_nanosleep": 230,
    # facts about the process itself, and its limits (which nobody can only lower)
    "getpid": 39, "uname": 63, "getrlimit": 97, "sysinfo": 99, "getuid": 102, "getgid": 104,
    "geteuid": 107, "getegid": 108, "getppid": 110, "gettid": 186, "sched_getaffinity": 204,
    "prlimit64": 302, "getrandom": 318,
    # the C runtime's start-up and exit
    "arch_prctl": 158, "futex": 202, "set_tid_address": 218, "set_robust_list": 273, "rseq": 334,
    "exit": 60, "exit_group": 231,
}  # fmt: skip
IOCTL_REQUESTS = {"TCGETS": 0x5401, "FIONCLEX": 0x5450, "FIOCLEX": 0x5451}
# Calls the tests prove refused; none may ever join the allowlist.
NEVER = {
    "socket": 41, "connect": 42, "accept": 43, "sendto": 44, "recvfrom": 45, "sendmsg": 46, "recvmsg": 47,
    "bind": 49, "listen": 50, "socketpair": 53, "clone": 56, "fork": 57, "vfork": 58, "execve": 59,
    "kill": 62, "ptrace": 101, "mount": 165, "tkill": 200, "tgkill": 234, "unshare": 272, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "bpf": 321, "execveat": 322, "userfaultfd": 323,
    "io_uring_setup": 425, "clone3": 435, "pidfd_open": 434, "pidfd_send_signal": 424,
}  # fmt: skip
SYS_IOCTL, SYS_EXECVE = 16, 59

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
RET_KILL_PROCESS, RET_ALLOW, RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
EPERM = 1
# classic BPF opcodes
LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
ARG1, ARG3 = 16 + 1 * 8, 16 + 3 * 8  # offsets of seccomp_data.args[1] and args[3] (low words)
ALLOW, DENY = (RET_K, 0, 0, RET_ALLOW), (RET_K, 0, 0, RET_ERRNO | EPERM)


class SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def only_if(nr: int, block: list[Instruction]) -> list[Instruction]:
    """`block` (which ends in returns) for syscall `nr`; every other number jumps past it."""
    return [(JEQ_K, 0, len(block), nr), *block]


def keyed_execve(key: int) -> list[Instruction]:
    """execve whose fourth argument (a register the kernel does not read for execve) holds the 64-bit key."""
    return only_if(SYS_EXECVE, [
        (LD_W_ABS, 0, 0, ARG3), (JEQ_K, 0, 3, key & 0xFFFFFFFF),
        (LD_W_ABS, 0, 0, ARG3 + 4), (JEQ_K, 0, 1, key >> 32),
        ALLOW, DENY,
    ])  # fmt: skip


def ioctl_requests(requests: list[int]) -> list[Instruction]:
    """ioctl for the listed requests only (the kernel reads the request as 32 bits: the low word)."""
    checks = [(JEQ_K, len(requests) - i, 0, request) for i, request in enumerate(requests)]
    return only_if(SYS_IOCTL, [(LD_W_ABS, 0, 0, ARG1), *checks, DENY, ALLOW])


def program(allowed: list[int], exec_key: int = 0, ioctl: list[int] | None = None) -> list[Instruction]:
    """The filter: check the architecture, let the launcher's keyed execve and the listed ioctl requests
    through, refuse x32, allow each number in `allowed` and refuse the rest with EPERM."""
    head = [
        (LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        (RET_K, 0, 0, RET_KILL_PROCESS),
        (LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if exec_key:
        head += keyed_execve(exec_key)
    if ioctl:
        head += ioctl_requests(ioctl)
    if len(allowed) > 250:
        raise ValueError("a jump in classic BPF reaches at most 255 instructions")
    refuse_x32 = (JGE_K, len(allowed), 0, X32_SYSCALL_BIT)  # to DENY, past the checks
    checks = [(JEQ_K, len(allowed) - i, 0, nr) for i, nr in enumerate(allowed)]
    return [*head, refuse_x32, *checks, DENY, ALLOW]


def supported() -> bool:
    return os.uname().sysname == "Linux" and os.uname().machine == "x86_64"


def install(exec_key: int = 0) -> None:
    """Install the filter on this process (and every thread and child it would have, and every program
    it executes). Raises OSError when the kernel refuses, RuntimeError on an architecture the table does
    not cover."""
    if not supported():
        raise RuntimeError(f"seccomp filter written for x86-64, not {os.uname().machine}")
    if not 0 <= exec_key < 1 << 64:
        raise ValueError("the exec key is a 64-bit number")
    code = program(sorted(ALLOWED.values()), exec_key, sorted(IOCTL_REQUESTS.values()))
    filters = (SockFilter * len(code))(*(SockFilter(*insn) for insn in code))
    prog = SockFprog(len(code), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
