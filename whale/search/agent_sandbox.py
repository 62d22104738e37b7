"""What the agent CLI may see in its Landlock sandbox: the system paths it reads, its environment, and the
folders its executable and Python live in; and how its process group is killed."""

from __future__ import annotations

import os
import shutil
import signal
import sys

SYSTEM_READ = (
    "/usr /lib /lib32 /lib64 /libx32 /bin /sbin /etc /opt /proc /sys /dev /run/systemd/resolve".split()
)


DEVICES = "/dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty /dev/ptmx /dev/pts".split()


ENV_NAMES = tuple(
    "PATH HOME LANG LANGUAGE LC_ALL LC_CTYPE TERM TZ USER LOGNAME SHELL HTTP_PROXY HTTPS_PROXY NO_PROXY "
    "ALL_PROXY http_proxy https_proxy no_proxy all_proxy SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE "
    "NODE_EXTRA_CA_CERTS".split()
)


ENV_PREFIXES = tuple(
    "ANTHROPIC_ CLAUDE_ OPENAI_ CODEX_ AZURE_OPENAI_ AWS_ GOOGLE_ GEMINI_ VERTEX_ OPENROUTER_".split()
)


def agent_env(extra: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ENV_NAMES or k.startswith(ENV_PREFIXES) or k in extra}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("HOME", os.path.expanduser("~"))
    env.setdefault("LANG", "C.UTF-8")
    return env


def resolve_executable(name: str, path_env: str) -> str | None:
    if os.sep in name:
        path = os.path.abspath(os.path.expanduser(name))
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    found = shutil.which(name, path=path_env)
    return os.path.abspath(found) if found else None


def install_paths(exe: str, path_env: str, depth: int = 0) -> list[str]:
    """What the agent's own install needs to be readable: the executable's real folder, the enclosing
    package root (a folder with package.json, for npm installs), and the same for a script's interpreter."""
    real = os.path.realpath(exe)
    folder = os.path.dirname(real)
    paths = [real, folder]
    up = folder
    for _ in range(3):
        up = os.path.dirname(up)
        if os.path.isfile(os.path.join(up, "package.json")):
            paths.append(up)
            break
    if depth == 0:
        try:
            with open(real, "rb") as f:
                first = f.readline(256)
        except OSError:
            first = b""
        if first.startswith(b"#!"):
            words = first[2:].decode(errors="replace").split()
            if words and os.path.basename(words[0]) == "env":
                words = [w for w in words[1:] if not w.startswith("-")]
            interpreter = resolve_executable(words[0], path_env) if words else None
            if interpreter:
                paths += install_paths(interpreter, path_env, depth + 1)
    return paths


def python_paths() -> list[str]:
    """The Python running the wrapper (it execs the agent, and scripted agents use it too)."""
    return sorted(
        {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    )


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
