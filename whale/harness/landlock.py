"""Landlock, Linux's unprivileged filesystem sandbox, through ctypes; and an exec wrapper that applies it.

Landlock (Linux 5.13+) lets any process, root or not, give up filesystem access for itself and every
process it starts afterwards; nothing can lift the restriction again. This module is standard library
only and never imports whale, so it runs as a script:

    python -I landlock.py '<rules json>' -- program arg...

The wrapper sets PR_SET_NO_NEW_PRIVS (required by Landlock), PR_SET_PDEATHSIG (the program dies with
the process that started it), restricts itself to the rules, then runs the program as its child and
stays as its subreaper: on the program's exit, or on SIGTERM, it kills everything the program left
behind, including processes that escaped its process group with setsid(). Where the kernel allows it
(root, or unprivileged user namespaces) the program also runs in a PID namespace of its own, under a
small init that dies with the wrapper: even a wrapper killed with SIGKILL takes every process of the
session with it. With "enforce":
true it fails closed: if the sandbox cannot be applied the program is not started (exit status 126).

Rules: {"read": [paths], "write": [paths], "devices": [paths], "enforce": bool, "parent_pid": int}.
  read     read files, list directories, execute programs, beneath each path
  write    read plus create, write, truncate, rename, link and remove, beneath each path
  devices  read plus write/ioctl on existing files (/dev/null, /dev/tty), never create or remove
Everything else on the filesystem is refused (EACCES). Path lookup itself is not restricted (stat of a
path can still succeed); opening, listing, executing and modifying are. Chmod, chown, utime and network
access are outside Landlock's filesystem rights and stay allowed; on ABI 6+ the program also may not
signal processes outside its sandbox.

Access rights follow the kernel's ABI version: REFER from ABI 2, TRUNCATE from ABI 3, IOCTL_DEV from
ABI 5, signal scoping from ABI 6. Rights a kernel does not know are left out, which on older kernels
means those operations are not restricted (ABI 1: cross-directory renames are always refused).
"""

from __future__ import annotations

import ctypes
import json
import os
import stat
import sys

SYS_CREATE_RULESET = 444  # same numbers on x86_64, aarch64 and the other unified-table architectures
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
SCOPE_SIGNAL = 1 << 1  # ABI 6

ABI1_RIGHTS = (1 << 13) - 1
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the rights a rule on a file may hold
READ_RIGHTS = EXECUTE | READ_FILE | READ_DIR
DEVICE_RIGHTS = READ_RIGHTS | WRITE_FILE | TRUNCATE | IOCTL_DEV


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class LandlockError(OSError):
    pass


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing, disabled or blocked (e.g. seccomp)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        v = _libc().syscall(
            ctypes.c_long(SYS_CREATE_RULESET),
            None,
            ctypes.c_size_t(0),
            ctypes.c_uint32(CREATE_RULESET_VERSION),
        )
    except (OSError, AttributeError):
        return 0
    return max(int(v), 0)


def handled_rights(abi: int) -> int:
    rights = ABI1_RIGHTS
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def write_rights(abi: int) -> int:
    return handled_rights(abi)


def restrict(read: list[str], write: list[str], devices: list[str] = (), listable: list[str] = ()) -> int:
    """Restrict this process (and all it starts afterwards) to the given paths, for good: `listable`
    folders may be listed, not read. Missing paths are skipped. Returns the ABI version used; raises
    LandlockError when Landlock is unavailable or a step fails, in which case nothing has been restricted
    yet unless the failure was in the last step."""
    abi = abi_version()
    if abi < 1:
        raise LandlockError("Landlock is not available in this kernel")
    libc = _libc()
    handled = handled_rights(abi)
    attr = _RulesetAttr(handled, 0, SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 8
    ruleset = libc.syscall(
        ctypes.c_long(SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        grants = [(p, READ_RIGHTS) for p in read]
        grants += [(p, READ_DIR) for p in listable]
        grants += [(p, DEVICE_RIGHTS) for p in devices]
        grants += [(p, write_rights(abi)) for p in write]
        for path, rights in grants:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                allowed = rights & handled
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    allowed &= FILE_RIGHTS
                rule = _PathBeneathAttr(allowed, fd)
                if (
                    libc.syscall(
                        ctypes.c_long(SYS_ADD_RULE),
                        ctypes.c_int(ruleset),
                        ctypes.c_int(RULE_PATH_BENEATH),
                        ctypes.byref(rule),
                        ctypes.c_uint32(0),
                    )
                    < 0
                ):
                    err = ctypes.get_errno()
                    raise LandlockError(err, f"landlock_add_rule {path}: {os.strerror(err)}")
            finally:
                os.close(fd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
        if libc.syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset)
    return abi


def wrapper_argv(rules: dict, argv: list[str]) -> list[str]:
    """The command line that runs argv under these rules (see the module docstring)."""
    return [sys.executable, "-I", os.path.abspath(__file__), json.dumps(rules), "--", *argv]


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        print("usage: landlock.py '<rules json>' -- program [arg...]", file=sys.stderr)
        return 2
    rules, argv = json.loads(args[0]), args[2:]
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)  # SIGKILL with the parent
    except (OSError, AttributeError):
        pass
    parent = int(rules.get("parent_pid") or 0)
    if parent and os.getppid() != parent:
        return 125  # the parent is already gone
    problem = new_pid_namespace() if rules.get("pid_namespace", True) else "not asked for"
    print(f"whale landlock: pid namespace {'off (' + problem + ')' if problem else 'on'}", file=sys.stderr)
    if rules.get("enforce", True):
        try:
            abi = restrict(rules.get("read", []), rules.get("write", []), rules.get("devices", []))
        except (LandlockError, OSError) as exc:
            print(f"whale landlock: sandbox not applied, not starting {argv[0]}: {exc}", file=sys.stderr)
            return 126
        print(f"whale landlock: ABI {abi} sandbox applied", file=sys.stderr)
    else:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    sys.stderr.flush()
    return supervise(argv, own_namespace=not problem)


def new_pid_namespace() -> str:
    """Have this process's next child start a PID namespace of its own, as its pid 1: when that child
    exits, the kernel kills every process left inside, however it was started or reparented. Root may
    do this; others need a user namespace too (their ids mapped to themselves). Returns what failed."""
    return unshare(CLONE_NEWPID)


def unshare(namespaces: int) -> str:
    """Move this process into new namespaces (`namespaces`: CLONE_NEW* flags). Root may; others need a
    user namespace as well, with their ids mapped to themselves. Returns what failed ("" when nothing)."""
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    flags = namespaces if os.geteuid() == 0 else CLONE_NEWUSER | namespaces
    if libc.unshare(flags) != 0:
        return f"unshare: {os.strerror(ctypes.get_errno())}"
    if flags & CLONE_NEWUSER:
        try:
            ids = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
            for name, text in ids:
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        except OSError as exc:
            return f"user namespace ids: {exc}"
    return ""


def _children() -> list[int]:
    """This process's live children, read from /proc (orphans of the program are reparented here)."""
    me, found = str(os.getpid()), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[1] == me and fields[0] != "Z":
                found.append(int(entry))
    return found


def _kill_descendants() -> None:
    """SIGKILL every child until none is left; as each dies, its own children are reparented here (we
    are their subreaper), so daemonised or setsid() descendants cannot outlive the session."""
    while True:
        for pid in _children():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        try:
            if os.waitpid(-1, 0)[0] == 0:
                continue
        except ChildProcessError:
            return


def _execute(argv: list[str]) -> None:
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        print(f"whale landlock: cannot execute {argv[0]}: {exc}", file=sys.stderr)
    os._exit(127)


def _init(argv: list[str], wrapper: int) -> None:
    """Pid 1 of the session's namespace: start the program, reap what is reparented here, and exit with
    the program's status; the kernel then kills whatever is left inside."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)  # dies with the wrapper
    if not os.path.exists(f"/proc/{wrapper}"):  # /proc is the wrapper's; getppid() is 0 in here
        os._exit(125)
    program = os.fork()
    if program == 0:
        _execute(argv)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == program:
            os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def supervise(argv: list[str], own_namespace: bool = False) -> int:
    """Run argv as a child (in its namespace, under `_init`) and stay as its subreaper: when it exits, or
    when we get SIGTERM (the session timed out), every process it left behind is killed, even those that
    left its process group."""
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    wrapper = os.getpid()
    pid = os.fork()
    if pid == 0:
        if own_namespace:
            _init(argv, wrapper)
        _execute(argv)

    def stop(*_: object) -> None:
        _kill_descendants()
        os._exit(124)

    signal.signal(signal.SIGTERM, stop)
    _, status = os.waitpid(pid, 0)
    _kill_descendants()
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # Landlock ABI 4

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # Landlock ABI 6


def restrict_network(abi: int) -> None:
    """A second Landlock layer (`restrict` covers the filesystem only): no TCP bind or connect to
    any port, and from ABI 6 no connecting to abstract unix sockets outside the sandbox."""
    libc = _libc()
    attr = _RulesetAttr(0, NET_BIND_TCP | NET_CONNECT_TCP, SCOPE_ABSTRACT_UNIX_SOCKET if abi >= 6 else 0)
    size = ctypes.sizeof(attr) if abi >= 6 else 16
    ruleset = libc.syscall(
        ctypes.c_long(SYS_CREATE_RULESET),
        ctypes.byref(attr),
        ctypes.c_size_t(size),
        ctypes.c_uint32(0),
    )
    if ruleset < 0:
        raise LandlockError(ctypes.get_errno(), "landlock_create_ruleset (network)")
    try:
        if libc.syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise LandlockError(ctypes.get_errno(), "landlock_restrict_self (network)")
    finally:
        os.close(ruleset)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
