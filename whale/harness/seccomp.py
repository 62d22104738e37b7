"""A seccomp-bpf filter the worker launcher installs before it starts the worker's Python: the OS wall
behind the Python layers. A harness that gets around every Python-level check still cannot open a socket
of any family, send or receive on one, start a program, fork, trace or read another process's memory,
or reach the kernel's rarer attack surface (bpf, io_uring, user namespaces, keyrings, module loading).
Each refused call fails with EPERM, so the harness sees an ordinary PermissionError and its rollout
fails with a reason.

The filter is a deny-list over syscall numbers for x86-64, written here as classic BPF (no libseccomp
binding needed: the launcher reaches prctl through ctypes anyway). Any other architecture, and the x32
ABI, is killed outright rather than allowed through numbers this table does not know.
"""

from __future__ import annotations

import ctypes
import platform

# x86-64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl)
DENIED = {
    "socket": 41, "connect": 42, "accept": 43, "sendto": 44, "recvfrom": 45, "sendmsg": 46, "recvmsg": 47,
    "shutdown": 48, "bind": 49, "listen": 50, "getsockname": 51, "getpeername": 52, "socketpair": 53,
    "setsockopt": 54, "getsockopt": 55, "clone": 56, "fork": 57, "vfork": 58, "execve": 59,
    "ptrace": 101, "chroot": 161, "mount": 165, "umount2": 166, "swapon": 167, "reboot": 169,
    "init_module": 175, "delete_module": 176, "pivot_root": 155, "kexec_load": 246, "add_key": 248,
    "request_key": 249, "keyctl": 250, "unshare": 272, "accept4": 288, "perf_event_open": 298,
    "recvmmsg": 299, "name_to_handle_at": 303, "open_by_handle_at": 304, "sendmmsg": 307, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313, "bpf": 321, "execveat": 322,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "clone3": 435,
}  # fmt: skip

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
RET_KILL_PROCESS, RET_ALLOW, RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
EPERM = 1
# classic BPF opcodes
LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
ARG3 = 16 + 3 * 8  # offset of seccomp_data.args[3]


class SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def program(denied: list[int], exec_key: int = 0) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions: check the architecture, refuse x32, then EPERM for
    each denied number and allow the rest. With an `exec_key`, an execve whose fourth argument (a register
    the kernel does not read for execve) holds that 64-bit key is allowed: the launcher's own, once."""
    head = [
        (LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        (RET_K, 0, 0, RET_KILL_PROCESS),
        (LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if exec_key:
        head += [
            (JEQ_K, 0, 6, DENIED["execve"]),
            (LD_W_ABS, 0, 0, ARG3),  # the key's low word (little-endian)
            (JEQ_K, 0, 3, exec_key & 0xFFFFFFFF),
            (LD_W_ABS, 0, 0, ARG3 + 4),
            (JEQ_K, 0, 1, exec_key >> 32),
            (RET_K, 0, 0, RET_ALLOW),
            (RET_K, 0, 0, RET_ERRNO | EPERM),
        ]
    checks = [(JGE_K, 0, 0, X32_SYSCALL_BIT), *((JEQ_K, 0, 0, nr) for nr in denied)]
    deny_at = len(checks) + 1  # after the checks and the allow: the deny return
    body = [(code, deny_at - i - 1, 0, k) for i, (code, _, _, k) in enumerate(checks)]
    return [*head, *body, (RET_K, 0, 0, RET_ALLOW), (RET_K, 0, 0, RET_ERRNO | EPERM)]


def supported() -> bool:
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")


def install(exec_key: int = 0) -> None:
    """Install the filter on this process (and every thread and child it would have, and every program
    it executes). Raises OSError when the kernel refuses, RuntimeError on an architecture the table does
    not cover."""
    if not supported():
        raise RuntimeError(f"seccomp filter written for x86-64, not {platform.machine()}")
    if not 0 <= exec_key < 1 << 64:
        raise ValueError("the exec key is a 64-bit number")
    code = program(sorted(DENIED.values()), exec_key)
    filters = (SockFilter * len(code))(*(SockFilter(*insn) for insn in code))
    prog = SockFprog(len(code), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
