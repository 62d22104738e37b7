"""A sandbox worker process as the runner sees it: the process, its pipe buffer, the job it runs, and how it
is started, written to and killed. What crosses the pipe is JSON frames only (never pickle)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import select
import signal
import struct
import subprocess
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from whale.harness.calls import RolloutJob, RunnerLimits
from whale.harness.launcher import worker_command
from whale.harness.records import Rollout, ToolCall
from whale.harness.restricted import MAX_LOG_CHARS, MAX_LOG_ENTRIES
from whale.harness.task import Task, Toolbox
from whale.model.engine import Generation, GenerationRequest

PIPE_BYTES = 1 << 20  # parent-to-worker pipe: room for any one reply, so a worker that reads never fills it
START_WAIT_S = 10.0  # how long the parent waits to hand a job to a worker that sits in its read loop
REPLY_WAIT_S = 1.0  # ... and a reply to a worker that asked for it (a worker that reads takes it at once)


@dataclass
class WorkerProcess:
    """One sandbox worker process and the rollout it is running (if any)."""

    proc: subprocess.Popen
    buf: bytearray = field(default_factory=bytearray)
    job: RolloutJob | None = None
    task: Task | None = None
    rollout: Rollout | None = None
    toolbox: Toolbox | None = None
    request: dict[str, Any] | None = None  # queued chat request, when waiting on the model
    began: float = 0.0  # wall clock at the job's start: the rollout clock
    resumed: float = 0.0  # the step clock: the last model or tool reply
    served: int = 0
    secret: str = ""  # the current job's; only a done message that carries it ends the rollout
    sandbox: dict[str, Any] | None = None  # what the worker's hello said about its OS sandbox
    retire: bool = False
    # continuous batching: engine handle -> (sample index, request) of the queued call, and its results
    handles: dict[int, tuple[int, GenerationRequest]] = field(default_factory=dict)
    results: list[tuple[GenerationRequest, Generation] | None] = field(default_factory=list)
    verify: bool = True  # the current job's
    owner: str = ""  # the one candidate (id and code) this worker runs; it never runs another
    tool: Future[ToolCall] | None = None  # the tool call in flight, on the runner's ToolPool
    tool_name: str = ""
    tool_began: float = 0.0


def owner_of(job: RolloutJob, splits_of: dict[str, str]) -> str:
    """Who a worker belongs to: one candidate (its id and code) on the tasks of one split. So a harness
    that got past the Python layers can leave no implant for another candidate, and nothing it saw of one
    split's tasks (test inputs, say) can reach the traces of another's (search, which a proposer reads)."""
    return f"{splits_of.get(job.task.id, '')}:{job.harness.id}:{source_digest(job.harness.source)}"


@functools.lru_cache(maxsize=256)
def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "replace")).hexdigest()[:16]


def next_job(
    queue: deque[tuple[int, RolloutJob]], owner: Callable[[RolloutJob], str], idle: set[str]
) -> tuple[int, RolloutJob]:
    """The first queued job that an idle worker of its owner can take, else the first one: a worker that
    is up serves its candidate's next job rather than a fresh one starting beside it (an evaluation's
    splits, whose jobs arrive interleaved)."""
    if idle:
        for item in queue:
            if owner(item[1]) in idle:
                queue.remove(item)
                return item
    return queue.popleft()


def splits_by_task(domain: Any) -> dict[str, str]:
    """Task id -> the names of the domain's splits that hold it ("+"-joined); none for a domain without
    splits, or a task of none (a user's question to a deployed agent)."""
    held: dict[str, set[str]] = {}
    splits = getattr(domain, "splits", None)
    for name, tasks in (splits() if callable(splits) else {}).items():
        for task in tasks:
            held.setdefault(task.id, set()).add(name)
    return {tid: "+".join(sorted(names)) for tid, names in held.items()}


def spawn_worker(memory_mb: int, cpu_s: int) -> WorkerProcess:
    """A fresh sandbox worker process (launcher.py, then `python -m whale.harness.worker`) in its own
    session."""
    argv, env = worker_command(memory_mb, cpu_s)
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
        cwd="/",
    )
    fd = proc.stdin.fileno()
    with contextlib.suppress(OSError):  # a larger pipe where the kernel allows it; 64 KB otherwise
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    os.set_blocking(fd, False)
    return WorkerProcess(proc)


def harness_computing(w: WorkerProcess) -> bool:
    """Whether the step clock runs: the worker is up (its hello came; a fresh one's start-up is not the
    harness's compute) and waits on no model reply. The rollout clock bounds the rest."""
    return w.sandbox is not None and w.request is None


def deadline(w: WorkerProcess, limits: RunnerLimits) -> float:
    """When this worker's current wait runs out (monotonic seconds)."""
    total = w.began + limits.rollout_timeout_s
    if w.tool is not None:
        return min(total, w.tool_began + limits.tool_timeout_s)
    return min(total, w.resumed + limits.step_timeout_s) if harness_computing(w) else total


def overdue(w: WorkerProcess, limits: RunnerLimits) -> str | None:
    """Why this worker has run over one of its clocks, if it has."""
    now = time.monotonic()
    if now - w.began > limits.rollout_timeout_s:
        return f"timeout: rollout ran over {limits.rollout_timeout_s:g}s"
    if w.tool is not None:
        if now - w.tool_began > limits.tool_timeout_s:
            return f"timeout: tool {w.tool_name} ran over {limits.tool_timeout_s:g}s"
        return None
    if harness_computing(w) and now - w.resumed > limits.step_timeout_s:
        return f"timeout: harness computed {limits.step_timeout_s:g}s without a model or tool call"
    return None


def send_frame(w: WorkerProcess, msg: dict[str, Any], wait_s: float = 0.0) -> bool:
    """One length-prefixed JSON frame to the worker, without ever blocking the parent for more than
    `wait_s`. False when the frame did not fit: the worker is not reading what it is sent (a worker that
    is waiting for a reply has an empty pipe, PIPE_BYTES deep), and the stream is now cut mid-frame."""
    data = json.dumps(msg, default=str).encode()
    view = memoryview(struct.pack(">I", len(data)) + data)
    deadline = time.monotonic() + wait_s
    try:
        fd = w.proc.stdin.fileno()
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([], [fd], [], left)[1]:
                    return False
    except (BrokenPipeError, OSError, ValueError):
        pass  # the worker died (or was killed and its pipe closed); its EOF is seen by the select loop
    return True


def kill_worker(w: WorkerProcess) -> None:
    """SIGKILL the worker's whole process group and close its pipes."""
    if w.proc.poll() is None:
        try:
            os.killpg(w.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        w.proc.wait()
    for stream in (w.proc.stdin, w.proc.stdout):
        try:
            stream.close()
        except OSError:
            pass


def capped_logs(logs: Any) -> list[str]:
    """A done message's logs, held to the worker's own caps whatever the message says."""
    out, chars = [], 0
    for entry in logs if isinstance(logs, list) else []:
        if len(out) > MAX_LOG_ENTRIES or chars >= MAX_LOG_CHARS + 200:
            out.append("[whale: further output dropped]\n")
            break
        text = str(entry)[: MAX_LOG_CHARS + 200 - chars]
        out.append(text)
        chars += len(text)
    return out


def exit_reason(code: int) -> str:
    """Name the limit that most likely killed a worker from its exit status."""
    if code == -signal.SIGXCPU:
        return "cpu limit: the worker used up its CPU-time limit"
    if code == -signal.SIGKILL:
        return "killed: the worker got a SIGKILL the runner did not send (out of memory?)"
    if code < 0:
        return f"crash: worker died on signal {signal.Signals(-code).name}"
    return f"crash: worker exited with status {code}"
