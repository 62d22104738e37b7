"""Sandbox worker: runs untrusted harness code, one rollout at a time, in a process of its own.

Started by `RolloutRunner` as `python -m whale.harness.worker`. It talks to the parent with length-prefixed
JSON frames on private copies of stdin/stdout (never pickle: the parent must not unpickle untrusted
bytes), then points fds 0-2 at /dev/null, caps its own resources, and executes harness code with
restricted builtins and an import hook that hands out module proxies without private names or
submodules (so `json.codecs` or `random._os` are not a way out). Model and tool calls block on the
parent; gold answers never cross this boundary.
"""

from __future__ import annotations

import builtins
import json
import os
import resource
import struct
import sys
import time
import types
from typing import Any

PRELOADED = ("re", "math", "json", "collections", "itertools", "functools", "statistics", "random", "string")
# Modules the allowed ones import lazily (Counter.most_common -> heapq, ...): loaded before the audit hook
# goes up, because the hook refuses every later import.
LAZY_DEPENDENCIES = (
    "heapq",
    "operator",
    "bisect",
    "copy",
    "keyword",
    "reprlib",
    "fractions",
    "decimal",
    "numbers",
)
MAX_FRAME = 4 << 20
MAX_LOG_CHARS = 20_000
SAFE_BUILTINS = (
    "abs all any bool bytes callable chr dict divmod enumerate filter float format frozenset hash int "
    "isinstance issubclass iter len list map max min next ord pow range repr reversed round set slice "
    "sorted str sum tuple zip hasattr "
    "ArithmeticError AssertionError AttributeError Exception IndexError KeyError LookupError NameError "
    "NotImplementedError OverflowError RecursionError RuntimeError StopIteration TypeError ValueError "
    "ZeroDivisionError True False None"
).split()


class ToolError(Exception):
    """Raised inside the harness when a tool call is refused."""


class LLMError(Exception):
    """Raised inside the harness when a model call is malformed."""


class Channel:
    def __init__(self, rfd: int, wfd: int):
        self.r = os.fdopen(rfd, "rb", buffering=0)
        self.w = os.fdopen(wfd, "wb", buffering=0)

    def send(self, msg: dict[str, Any]) -> None:
        data = json.dumps(msg, default=str).encode()
        self.w.write(struct.pack(">I", len(data)) + data)

    def recv(self) -> dict[str, Any]:
        head = self._read(4)
        (size,) = struct.unpack(">I", head)
        if size > MAX_FRAME:
            raise SystemExit(3)
        return json.loads(self._read(size))

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.r.read(n - len(buf))
            if not chunk:
                raise SystemExit(0)
            buf += chunk
        return buf


def module_proxy(mod: types.ModuleType) -> types.SimpleNamespace:
    public = {
        k: v for k, v in vars(mod).items() if not k.startswith("_") and not isinstance(v, types.ModuleType)
    }
    return types.SimpleNamespace(**public)


def make_builtins(proxies: dict[str, types.SimpleNamespace], logs: list[str]) -> dict[str, Any]:
    safe = {name: getattr(builtins, name) for name in SAFE_BUILTINS}

    def guarded_import(name: str, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
        if level != 0 or name not in proxies:
            raise ImportError(f"import of {name!r} is not allowed in a harness")
        return proxies[name]

    def captured_print(*args: Any, sep: str = " ", end: str = "\n", **_: Any) -> None:
        if sum(len(x) for x in logs) < MAX_LOG_CHARS:
            logs.append(sep.join(str(a) for a in args) + end)

    safe.update(
        __import__=guarded_import,
        __build_class__=builtins.__build_class__,
        print=captured_print,
        ToolError=ToolError,
        LLMError=LLMError,
    )
    return safe


class LLMProxy:
    """The `llm` a harness sees: every call crosses to the parent, which batches and records it."""

    def __init__(self, channel: Channel):
        self._channel = channel

    def chat(
        self,
        messages: list[dict[str, str]],
        max_tokens: int | None = None,
        temperature: float | None = None,
        stop: list[str] | str | None = None,
        n: int = 1,
        train: bool = True,
    ) -> str | list[str]:
        if isinstance(stop, str):
            stop = [stop]
        request = {
            "op": "chat",
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stop": stop,
            "n": n,
            "train": train,
        }
        try:
            self._channel.send(request)
        except (TypeError, ValueError) as exc:
            raise LLMError(f"llm.chat arguments are not serialisable: {exc}") from None
        reply = self._channel.recv()
        if reply["op"] == "error":
            raise LLMError(reply["message"])
        texts = reply["texts"]
        return texts[0] if n == 1 else texts


def make_tools(channel: Channel, names: list[str]) -> types.SimpleNamespace:
    def tool(name: str):
        def call(*args: Any, **kwargs: Any) -> Any:
            channel.send({"op": "tool", "name": name, "args": list(args), "kwargs": kwargs})
            reply = channel.recv()
            if reply["op"] == "error":
                raise ToolError(reply["message"])
            return reply["value"]

        return call

    return types.SimpleNamespace(**{name: tool(name) for name in names})


def run_harness(channel: Channel, msg: dict[str, Any], proxies: dict[str, types.SimpleNamespace]) -> None:
    logs: list[str] = []
    start = time.perf_counter()
    answer, error = None, None
    try:
        namespace: dict[str, Any] = {"__builtins__": make_builtins(proxies, logs), "__name__": "harness"}
        exec(compile(msg["code"], "harness.py", "exec"), namespace)  # noqa: S102 - the sandbox itself
        result = namespace["run"](msg["task"], LLMProxy(channel), make_tools(channel, msg["tools"]))
        if isinstance(result, (int, float)) and not isinstance(result, bool):
            result = str(result)
        if result is not None and not isinstance(result, str):
            error = f"HarnessError: run() returned {type(result).__name__}, expected str"
        else:
            answer = result
    except MemoryError:
        error = "MemoryError: harness exceeded its memory limit"
    except RecursionError:
        error = "RecursionError: maximum recursion depth exceeded"
    except Exception as exc:  # noqa: BLE001 - any harness failure is a recorded outcome
        error = f"{type(exc).__name__}: {str(exc)[:500]}"
    channel.send(
        {
            "op": "done",
            "answer": answer,
            "error": error,
            "logs": logs,
            "harness_s": time.perf_counter() - start,
        }
    )


def limit_resources(memory_mb: int, cpu_s: int) -> None:
    """OS limits the worker sets on itself after its imports: memory, CPU, no new files or processes."""
    soft_hard = [
        (resource.RLIMIT_AS, memory_mb << 20),
        (resource.RLIMIT_CPU, cpu_s),
        (resource.RLIMIT_FSIZE, 0),
        (resource.RLIMIT_NPROC, 0),
        (resource.RLIMIT_CORE, 0),
    ]
    for which, value in soft_hard:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1, highest + 1))


BLOCKED_EVENT_PREFIXES = (
    "open",
    "os.",
    "subprocess.",
    "socket.",
    "shutil.",
    "ctypes.",
    "pty.",
    "object.__getattr__",
    "import",
    "urllib.",
    "signal.",
    "resource.",
    "fcntl.",
    "mmap.",
    "sqlite3.",
    "code.__new__",
    "function.__new__",
)


def forbid_system_access(event: str, args: tuple) -> None:
    """Audit hook, the second layer under the static checks: once a harness may run, no file, process,
    socket or frame-introspection event is allowed in this process, whatever path reached it."""
    if event.startswith(BLOCKED_EVENT_PREFIXES):
        raise RuntimeError(f"forbidden operation in harness: {event}")


def die_with_parent() -> None:
    """Have Linux SIGKILL this worker when the parent dies (even by kill -9): no harness outlives a run."""
    parent = int(os.environ.get("WHALE_PARENT_PID", "0"))
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    if parent and os.getppid() != parent:
        raise SystemExit(0)  # the parent is already gone


def exec_snippet(channel: Channel, proxies: dict[str, types.SimpleNamespace]) -> None:
    """One-shot mode for the math python tool: run a model-written snippet, return what it printed."""
    msg = channel.recv()
    logs: list[str] = []
    error = None
    try:
        namespace: dict[str, Any] = {"__builtins__": make_builtins(proxies, logs), "__name__": "snippet"}
        exec(compile(msg["code"], "snippet.py", "exec"), namespace)  # noqa: S102 - the sandbox itself
    except MemoryError:
        error = "MemoryError: the code exceeded its memory limit"
    except Exception as exc:  # noqa: BLE001 - reported to the model as the tool's error
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    channel.send({"stdout": "".join(logs), "error": error})


def main() -> None:
    memory_mb, cpu_s = int(sys.argv[1]), int(sys.argv[2])
    one_shot = len(sys.argv) > 3 and sys.argv[3] == "--exec"
    die_with_parent()
    proxies = {name: module_proxy(__import__(name)) for name in PRELOADED}
    for name in LAZY_DEPENDENCIES:
        __import__(name)
    channel = Channel(os.dup(0), os.dup(1))
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    limit_resources(memory_mb, cpu_s)
    sys.setrecursionlimit(500)
    sys.addaudithook(forbid_system_access)
    if one_shot:
        exec_snippet(channel, proxies)
        return
    channel.send({"op": "ready"})
    while True:
        msg = channel.recv()
        if msg["op"] == "run":
            run_harness(channel, msg, proxies)
        else:
            return


if __name__ == "__main__":
    main()
