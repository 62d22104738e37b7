"""Sandbox worker: runs untrusted harness code, one rollout at a time, in a process of its own.

Started by `RolloutRunner` through the launcher (launcher.py), which applies the OS layers and then
becomes `python -m whale.harness.worker`: so this process never loads ctypes. It talks to the parent with
length-prefixed JSON frames on private copies of stdin/stdout (never pickle: the parent must not unpickle
untrusted bytes), then points fds 0-2 at /dev/null and adds its own layers before any harness code runs.
Layers, from the operating system inwards:

  namespace    a network namespace of its own, whose loopback is down (the launcher's).
  Landlock     no filesystem writes; reads of exactly the files this Python loaded while it started; no
               TCP bind or connect (ABI 4+); no abstract unix sockets or signals outside the sandbox (ABI
               6+). Where Landlock is missing the hello frame says so and the parent warns
               (`sandbox_status_problems`, `report_degraded`).
  privileges   a worker started as root runs as nobody, so the rlimits below bind (RLIMIT_NPROC does not
               apply to root) and file permissions apply.
  seccomp      an allowlist of 64 calls and 3 ioctls: no sockets, programs, processes, signals or
               tracing (seccomp.py).
  rlimits      address space, CPU seconds, no file growth, no new processes or threads, no new fds.
  audit hook   refuses file, process, socket, import, thread-state and frame-introspection events. Its
               rules are constants in its code and its record is bound as a default argument, so nothing
               a harness reaches through module globals can switch it off.
  builtins     a restricted set, an import hook that hands out read-only module proxies (public,
               non-module attributes; no `string.Formatter` attribute lookup, no `functools` hooks that
               read attributes by name or evaluate annotations), read-only `llm` and `tools`.
  checks       after each rollout: garbage is collected inside the rollout's own time, and a worker
               whose harness changed shared state (any module's globals, any class of the stdlib or of
               this module), started a thread, or attempted a forbidden operation is retired, so nothing
               carries over to the next rollout.

Model and tool calls block on the parent; gold answers never cross this boundary. The done frame of a
rollout carries a secret from the run message that harness code cannot read, so it cannot be forged.
"""

from __future__ import annotations

import _thread
import builtins
import gc
import json
import os
import struct
import sys
import time
import types
import warnings
from typing import Any

from whale.harness.confine import forbid_system_access, launched_status, limit_resources, startup_files
from whale.harness.restricted import (
    LAZY_DEPENDENCIES,
    MAX_LOG_CHARS,
    PRELOADED,
    SAFE_BUILTINS,
    LLMError,
    LogSink,
    ReadOnly,
    public_attributes,
)
from whale.harness.task import ToolError
from whale.harness.validate import HarnessInvalid

MAX_FRAME = 4 << 20
MAX_ERROR_CHARS = 500
RECURSION_LIMIT = 500
_MISSING = object()


class ChannelClosed(BaseException):
    """The parent closed the pipe or broke the protocol: the worker exits."""


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
            raise ChannelClosed("oversized frame from the parent")
        return json.loads(self._read(size))

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.r.read(n - len(buf))
            if not chunk:
                raise ChannelClosed("the parent closed the channel")
            buf += chunk
        return buf


def make_builtins(proxies: dict[str, ReadOnly], logs: LogSink) -> dict[str, Any]:
    safe = {name: getattr(builtins, name) for name in SAFE_BUILTINS}

    def guarded_import(name: str, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
        if level != 0 or name not in proxies:
            sys.audit("whale.refused", f"import of {str(name)[:80]!r} (ImportError)")  # the hook records it
            raise ImportError(f"import of {name!r} is not allowed in a harness")
        return proxies[name]

    def captured_print(*args: Any, sep: Any = " ", end: Any = "\n", **_: Any) -> None:
        if logs.chars >= MAX_LOG_CHARS:
            logs.write(str(end))  # counted, not kept
            return
        logs.write(str(sep).join(str(a) for a in args) + str(end))

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

    __slots__ = ("_channel", "_calls")

    def __init__(self, channel: Channel):
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_calls", [0, 0])  # calls made so far; the first of the last chat's

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot set {name!r}: llm is read-only in a harness")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete {name!r}: llm is read-only in a harness")

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
        self._calls[:] = [self._calls[0] + len(texts), self._calls[0]]
        return texts[0] if n == 1 else texts

    def calls_made(self) -> int:
        """The model calls this rollout has made so far (each of a chat's n samples is one)."""
        return self._calls[0]

    def credit(self, keep: bool | list[bool], calls: Any = None) -> None:
        """Say which model calls produced the answer, for training (whale/weights/examples.py): `keep` for
        the last chat's samples (one bool each, or one for all), or one bool for the indices in `calls`."""
        made, last = self._calls
        index = list(range(last, made) if calls is None else calls)
        flags = keep if isinstance(keep, list) else [keep] * len(index)
        try:
            self._channel.send({"op": "credit", "calls": index, "keep": flags})  # the parent checks them
        except (TypeError, ValueError) as exc:
            raise LLMError(f"llm.credit arguments are not serialisable: {exc}") from None
        reply = self._channel.recv()
        if reply["op"] == "error":
            raise LLMError(reply["message"])


def make_tools(channel: Channel, names: list[str]) -> ReadOnly:
    def tool(name: str):
        def call(*args: Any, **kwargs: Any) -> Any:
            channel.send({"op": "tool", "name": name, "args": list(args), "kwargs": kwargs})
            reply = channel.recv()
            if reply["op"] == "error":
                raise ToolError(reply["message"])
            return reply["value"]

        return call

    return ReadOnly(**{name: tool(name) for name in names})


def describe(exc: BaseException) -> str:
    """'Type: message' for any exception, however hostile its class (huge, failing or looping __str__)."""
    try:
        name = str(type(exc).__name__)[:100]
    except BaseException:  # noqa: BLE001 - a metaclass can make even the name fail
        name = "Exception"
    try:
        text = str(exc)[:MAX_ERROR_CHARS]
    except BaseException:  # noqa: BLE001
        text = "<the exception's message could not be printed>"
    return f"{name}: {text}" if text else name


def failure_reason(exc: BaseException) -> str:
    """The recorded reason for a harness that raised: '<kind>: <detail>' (kinds listed in records.py)."""
    if isinstance(exc, MemoryError):
        return "memory limit: MemoryError: harness exceeded its memory limit"
    if isinstance(exc, RecursionError):
        return "recursion limit: RecursionError: maximum recursion depth exceeded"
    if isinstance(exc, HarnessInvalid):
        return f"invalid: {str(exc)[:MAX_ERROR_CHARS]}"
    return f"crash: {describe(exc)}"


def compile_source(source: Any, filename: str, seen: list[str]) -> types.CodeType:
    try:
        return compile(source, filename, "exec")
    except (SyntaxError, ValueError) as exc:
        raise HarnessInvalid(describe(exc)) from None
    finally:
        del seen[:]  # the parser itself tries to open the file a syntax error names, to quote its line


def call_harness(
    code: types.CodeType, msg: dict[str, Any], channel: Channel, namespace: dict[str, Any]
) -> str | None:
    exec(code, namespace)  # noqa: S102 - the sandbox itself
    run = namespace.get("run")
    if not callable(run):
        raise HarnessInvalid("the harness defines no run(task, llm, tools)")
    result = run(msg["task"], LLMProxy(channel), make_tools(channel, msg["tools"]))
    if result is None:
        return None
    if isinstance(result, bool) or not isinstance(result, (str, int, float)):
        raise HarnessInvalid(f"run() returned {str(type(result).__name__)[:100]}, expected str")
    if isinstance(result, str):
        return str.__str__(result)  # a plain str, whatever subclass came back
    return float.__repr__(result) if isinstance(result, float) else int.__repr__(result)


def make_runner(seen: list[str], watched: list[tuple[str, Any, dict[str, Any]]]):
    """The per-rollout procedure. Its record of forbidden attempts and its snapshot of shared state are
    bound as default arguments: reading a function's defaults is an audited (refused) operation."""

    def changed_shared_state(_watched: list = watched, _missing: object = _MISSING) -> str | None:
        for label, live, saved in _watched:
            for key, value in saved.items():
                if live.get(key, _missing) is not value and key != "__warningregistry__":
                    return f"{label}.{key}"
            if len(live) != len(saved):
                added = [k for k in live if k not in saved and k != "__warningregistry__"]
                if added:
                    return f"{label}.{str(added[0])[:80]}"
        return None

    def run_harness(
        channel: Channel,
        msg: dict[str, Any],
        public: dict[str, dict[str, Any]],
        _seen: list[str] = seen,
        _changed: Any = changed_shared_state,
    ) -> None:
        del _seen[:]
        sys.setrecursionlimit(RECURSION_LIMIT)
        logs = LogSink()
        start = time.perf_counter()
        answer, error, retire = None, None, False
        try:
            proxies = {name: ReadOnly(**attrs) for name, attrs in public.items()}
            namespace = {"__builtins__": make_builtins(proxies, logs), "__name__": "harness"}
            answer = call_harness(compile_source(msg["code"], "harness.py", _seen), msg, channel, namespace)
        except ChannelClosed:
            raise
        except BaseException as exc:  # noqa: BLE001 - any harness failure is a recorded outcome
            answer, error = None, failure_reason(exc)
            # SystemExit, KeyboardInterrupt, ... or a MemoryError: this interpreter is not to be trusted again
            retire = isinstance(exc, MemoryError) or not isinstance(exc, Exception)
        proxies = namespace = None
        gc.collect()  # the harness's finalizers run now, inside its own step time
        changed = _changed()
        if _seen:
            error, retire = f"forbidden: {_seen[0]}", True
        elif changed:
            error, retire = f"forbidden: changed shared state: {changed}", True
        elif _thread._count():
            error, retire = "forbidden: started a thread", True
        if error is not None:
            answer = None
        channel.send(
            {
                "op": "done",
                "answer": answer,
                "error": error,
                "logs": logs.result(),
                "harness_s": time.perf_counter() - start,
                "retire": retire,
                "secret": msg.get("secret"),
            }
        )

    return run_harness


def snapshot_shared_state() -> list[tuple[str, Any, dict[str, Any]]]:
    """Every loaded module's globals and every mutable class they define, as they are before any harness
    runs (imports are refused afterwards, so the set of modules is final)."""
    watched: list[tuple[str, Any, dict[str, Any]]] = []
    classes: set[int] = set()
    for name, mod in sorted(sys.modules.items()):
        space = getattr(mod, "__dict__", None)
        if not isinstance(space, dict):
            continue
        watched.append((name, space, dict(space)))
        for key, value in list(space.items()):
            flags = getattr(value, "__flags__", 0) if isinstance(value, type) else 0
            if flags & (1 << 9) and not flags & (1 << 8) and id(value) not in classes:  # heap, mutable
                classes.add(id(value))
                watched.append((f"{name}.{key}", value.__dict__, dict(value.__dict__)))
    return watched


def exec_snippet(channel: Channel, public: dict[str, dict[str, Any]], seen: list[str], status: dict) -> None:
    """One-shot mode for the math python tool: run a model-written snippet, return what it printed."""
    msg = channel.recv()
    logs = LogSink()
    error = None
    proxies = {name: ReadOnly(**attrs) for name, attrs in public.items()}
    try:
        namespace: dict[str, Any] = {"__builtins__": make_builtins(proxies, logs), "__name__": "snippet"}
        exec(compile_source(msg["code"], "snippet.py", seen), namespace)  # noqa: S102 - the sandbox itself
    except ChannelClosed:
        raise
    except MemoryError:
        error = "MemoryError: the code exceeded its memory limit"
    except HarnessInvalid as exc:
        error = str(exc)[:300]
    except BaseException as exc:  # noqa: BLE001 - reported to the model as the tool's error
        error = describe(exc)[:300]
    if seen:
        error = f"forbidden: {seen[0]}"
    channel.send({"stdout": "".join(logs.result()), "error": error, "sandbox": status})


def ignore_unraisable(unraisable: Any) -> None:
    """sys.unraisablehook: the worker's stderr is /dev/null anyway."""


def main() -> None:
    parent = int(os.environ.get("WHALE_PARENT_PID", "0"))
    if parent and os.getppid() != parent:
        return  # the parent is already gone
    # A warning, or an exception raised in a finalizer, would be printed with its source line: reading
    # it is refused, and would count against an innocent harness.
    warnings.simplefilter("ignore")
    sys.unraisablehook = ignore_unraisable
    public = {name: public_attributes(__import__(name)) for name in PRELOADED}
    for name in LAZY_DEPENDENCIES:
        __import__(name)
    if sys.argv[1] == "--probe":  # the launcher asks what a worker reads while it starts
        print(json.dumps(startup_files()))
        return
    memory_mb, cpu_s = int(sys.argv[1]), int(sys.argv[2])
    one_shot = len(sys.argv) > 3 and sys.argv[3] == "--exec"
    for fd in os.environ.get("WHALE_ROOT_FDS", "").split(","):
        if fd:
            os.close(int(fd))  # the folders it started from: nothing is read from them any more
    status = launched_status()
    channel = Channel(os.dup(0), os.dup(1))
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    limit_resources(memory_mb, cpu_s, max(channel.r.fileno(), channel.w.fileno()))
    sys.setrecursionlimit(RECURSION_LIMIT)
    seen: list[str] = []
    watched = snapshot_shared_state()
    watched.append(("channel", vars(channel), dict(vars(channel))))
    run_harness = make_runner(seen, watched)
    del watched
    forbid_system_access.__defaults__ = (seen,)
    sys.addaudithook(forbid_system_access)
    if one_shot:
        exec_snippet(channel, public, seen, status)
        return
    channel.send({"op": "ready", "sandbox": status})
    while True:
        msg = channel.recv()
        if msg.get("op") != "run":
            return
        run_harness(channel, msg, public)


if __name__ == "__main__":
    try:
        main()
    except ChannelClosed:
        pass
