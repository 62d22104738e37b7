"""Runs many rollouts at once: harness code in sandbox workers, model calls batched in the parent.

The loop is event driven. Each busy worker computes (runs harness code), waits on the model (its `llm.chat`
request is queued here) or on a tool (run here, where the domain lives, on a ToolPool's threads under
`tool_timeout_s`). A step engine gets each request when it is made, another all queued requests as one batch
once no worker computes. In lockstep the engine moves only when every busy worker waits on it, so batches,
and bfloat16's draws, repeat run to run. A worker that computes too long is killed with its process group,
and its rollout records why.

A failed rollout's `Rollout.error` names a kind from records.py; a worker whose rollout failed with other
than crash, invalid, recursion limit, output too large or verify is not reused. Calls, logs and answers
are capped, so one rollout's record stays small. An OS sandbox layer (Landlock) a worker could not apply
is said once on stderr and listed in `sandbox_problems`. An engine built for the runner is closed with it.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import selectors
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from whale.core.timing import counted, timed
from whale.harness.calls import (
    RolloutJob,
    RunnerLimits,
    apply_credit,
    call_seed,
    chat_params,
    chat_problem,
    scripted,
)
from whale.harness.confine import report_degraded, sandbox_status_problems
from whale.harness.records import ModelCall, Rollout, ToolCall
from whale.harness.task import Verifier
from whale.harness.tool_pool import ToolPool
from whale.harness.worker_process import (
    REPLY_WAIT_S,
    START_WAIT_S,
    WorkerProcess,
    capped_logs,
    deadline,
    exit_reason,
    kill_worker,
    next_job,
    overdue,
    owner_of,
    send_frame,
    spawn_worker,
    splits_by_task,
)
from whale.model.engine import Engine, Generation, GenerationRequest, SamplingParams, StepEngine

MAX_FRAME = 4 << 20
MAX_ERROR_CHARS = 1000
REUSABLE_AFTER = ("crash: ", "invalid: ", "recursion limit: ", "output too large: ", "verify: ")


class RolloutRunner:
    """Owns a pool of sandbox workers and the engine; `run(jobs)` returns one Rollout per job, in order."""

    def __init__(
        self,
        engine: Engine,
        domain: Verifier,
        sampling: SamplingParams,
        limits: RunnerLimits | None = None,
        seed: int = 0,
    ):
        self.engine = engine
        self.owns_engine = False  # set where the engine was built for it: close() closes the engine too
        self.continuous = isinstance(engine, StepEngine)
        self._owners: dict[int, WorkerProcess] = {}  # engine handle -> worker, in continuous mode
        self.domain = domain
        self.sampling = sampling
        self.limits = limits or RunnerLimits()
        self.seed = seed
        self.engine_calls = 0
        self.idle: list[WorkerProcess] = []
        self.selector = selectors.DefaultSelector()
        self.tools = ToolPool(self.limits.workers)
        self.selector.register(self.tools.fd, selectors.EVENT_READ)
        self.sandbox: dict[str, Any] | None = None  # the latest worker's sandbox status
        self.sandbox_problems: list[str] = []  # sandbox layers some worker could not apply
        self._splits_of: dict[str, str] | None = None  # task id -> the splits that hold it

    @property
    def weights_version(self) -> str:
        return self.engine.weights_version

    def sync_weights(self, version: str, source: Any) -> None:
        """The engine serves the trainer's model in place: an update needs only the new label (the Ray
        executor copies the weights here)."""
        self.engine.weights_version = version

    def close(self) -> None:
        for w in self.idle:
            kill_worker(w)
        self.idle.clear()
        if self.tools.fd in self.selector.get_map():
            self.selector.unregister(self.tools.fd)
        self.tools.close()
        if self.owns_engine and hasattr(self.engine, "close"):
            self.engine.close()
            self.owns_engine = False

    def run(self, jobs: list[RolloutJob], on_done: Callable[[Rollout], None] | None = None) -> list[Rollout]:
        queue = deque(enumerate(jobs))
        results: dict[int, Rollout] = {}
        busy: dict[int, tuple[int, WorkerProcess]] = {}  # fd -> (job index, worker)
        try:
            with timed("rollouts"):
                self._drive(queue, results, busy, on_done)
        except BaseException:
            if self.continuous:
                self.engine.cancel()
                self._owners.clear()
            for fd, (_, w) in list(busy.items()):  # an engine error: no worker outlives the batch
                self.selector.unregister(w.proc.stdout)
                kill_worker(w)
                del busy[fd]
            raise
        return [results[i] for i in range(len(jobs))]

    def _drive(
        self,
        queue: deque,
        results: dict[int, Rollout],
        busy: dict[int, tuple[int, WorkerProcess]],
        on_done: Callable[[Rollout], None] | None,
    ) -> None:
        while queue or busy:
            while queue and len(busy) < self.limits.workers:
                index, job = next_job(queue, self._owner, {w.owner for w in self.idle})
                w = self._start_job(job)
                busy[w.proc.stdout.fileno()] = (index, w)
            stepping = self.continuous and self.engine.busy and self._may_step(queue, busy)
            timeout = 0.0 if stepping else self._next_deadline(busy)
            for key, _ in self.selector.select(timeout):
                if key.fd == self.tools.fd:
                    self.tools.drain()
                    continue
                index, w = busy[key.fd]
                if not self._pump(w):
                    continue
                if w.rollout is not None and w.job is None:
                    results[index] = self._finish(w, busy, key.fd)
                    if on_done:
                        on_done(results[index])
            for _, w in list(busy.values()):
                if w.tool is not None and w.tool.done() and w.job is not None:
                    self._tool_done(w)
            for fd, (index, w) in list(busy.items()):
                reason = overdue(w, self.limits)
                if reason or w.job is None:  # or ended by a protocol error while it was being answered
                    results[index] = self._fail(w, busy, fd, reason) if reason else self._finish(w, busy, fd)
                    if on_done:
                        on_done(results[index])
            if not self._may_step(queue, busy):
                continue
            waiting = [w for _, w in sorted(busy.values(), key=lambda b: b[0]) if w.request is not None]
            if self.continuous:
                for w in waiting:
                    if not w.handles and not w.results:
                        self._submit_model(w)
                if self.engine.busy:
                    self._step_model()
            elif waiting and len(waiting) == sum(w.tool is None for _, w in busy.values()):
                self._serve_model(waiting)  # no worker computes: the rest wait on the model or a tool

    def _may_step(self, queue: deque, busy: dict[int, tuple[int, WorkerProcess]]) -> bool:
        """In lockstep, the engine moves only once every rollout that can run has started and waits on it."""
        started = not queue or len(busy) >= self.limits.workers
        return not self.limits.lockstep or (started and all(w.request is not None for _, w in busy.values()))

    def _spawn(self) -> WorkerProcess:
        counted("workers started")
        return spawn_worker(self.limits.memory_mb, self.limits.cpu_s)

    def _take_worker(self, owner: str) -> WorkerProcess:
        """An idle worker that ran this same candidate on the same split before, with nothing unread in
        its pipe (anything there would not belong to the next job), else a fresh one. A worker never
        serves two candidates: one that got past the Python layers could leave an implant for the next
        (issue 23)."""
        for w in [w for w in reversed(self.idle) if w.owner == owner]:
            self.idle.remove(w)
            pending = w.buf or select.select([w.proc.stdout], [], [], 0)[0]
            if w.proc.poll() is None and not pending:
                return w
            kill_worker(w)
        w = self._spawn()
        w.owner = owner
        return w

    def _owner(self, job: RolloutJob) -> str:
        if self._splits_of is None:
            self._splits_of = splits_by_task(self.domain)
        return owner_of(job, self._splits_of)

    def _start_job(self, job: RolloutJob) -> WorkerProcess:
        w = self._take_worker(self._owner(job))
        now = time.monotonic()
        w.job, w.task, w.began, w.resumed, w.request = job, job.task, now, now, None
        w.verify = job.verify
        w.secret = secrets.token_hex(16)
        w.rollout = Rollout(job.task.id, job.harness.id, self.engine.weights_version, job.sample)
        w.toolbox = self.domain.toolbox(job.task)
        self.selector.register(w.proc.stdout, selectors.EVENT_READ)
        run = {
            "op": "run", "code": job.harness.source, "task": job.task.inputs, "tools": list(w.toolbox.names),
            "secret": w.secret,
        }  # fmt: skip
        self._send(w, run, START_WAIT_S)
        return w

    def _send(self, w: WorkerProcess, msg: dict[str, Any], wait_s: float = REPLY_WAIT_S) -> None:
        """A frame to the worker; one it does not take in time (it is not reading) ends its rollout."""
        if not send_frame(w, msg, wait_s):
            self._protocol_error(w, "the worker stopped reading what it is sent")

    def _protocol_error(self, w: WorkerProcess, why: str) -> None:
        """Only harness code misusing the pipe gets here: the worker dies, the rollout fails with `why`."""
        kill_worker(w)
        w.rollout.error = w.rollout.error or f"protocol: {why}"
        w.job = None

    def _pump(self, w: WorkerProcess) -> bool:
        """Read what the worker wrote and handle complete frames. False when the worker is gone."""
        chunk = os.read(w.proc.stdout.fileno(), 1 << 16)
        if not chunk:
            code = w.proc.wait()
            w.rollout.error = w.rollout.error or exit_reason(code)
            w.job = None
            return True
        w.buf.extend(chunk)
        while len(w.buf) >= 4:
            (size,) = struct.unpack(">I", w.buf[:4])
            if size > MAX_FRAME:
                self._protocol_error(
                    w, f"output too large: the worker sent a {size}-byte message (limit {MAX_FRAME})"
                )
                return True
            if len(w.buf) < 4 + size:
                break
            frame = bytes(w.buf[4 : 4 + size])
            del w.buf[: 4 + size]
            try:
                msg = json.loads(frame)
            except Exception as exc:  # noqa: BLE001 - 200 KB of '[' raise RecursionError, not ValueError
                self._protocol_error(w, f"unreadable message ({type(exc).__name__})")
                break
            try:
                self._handle(w, msg)
            except Exception as exc:  # noqa: BLE001 - whatever a forged message makes the parent raise
                self._protocol_error(w, f"malformed message ({type(exc).__name__}: {str(exc)[:200]})")
            if w.job is None:
                break
        return True

    def _handle(self, w: WorkerProcess, msg: dict[str, Any]) -> None:
        op = msg.get("op") if isinstance(msg, dict) else None
        if op == "ready":
            if w.sandbox is None:  # only the hello a fresh worker sends before any harness runs counts
                self._note_sandbox(w, msg.get("sandbox"))
            return
        if op in ("chat", "tool", "credit") and (w.request is not None or w.handles or w.tool is not None):
            self._protocol_error(w, f"a {op} request before the reply to the one in flight")
            return
        if op == "chat":
            error = chat_problem(msg, len(w.rollout.calls), self.limits)
            if error:
                self._send(w, {"op": "error", "message": error})
            else:
                w.request = msg
                if w.job.script is not None:  # a replay: the script answers, not the engine
                    self._reply(w, scripted(w.job.script, self._requests_of(w), w.rollout.calls))
            return
        if op == "tool":
            self._serve_tool(w, msg)
            return
        if op == "credit":
            error = apply_credit(msg, w.rollout.calls)
            self._send(w, {"op": "error", "message": error} if error else {"op": "credit_result"})
            return
        if op == "done":
            if msg.get("secret") != w.secret:
                self._protocol_error(w, "a done message without this job's secret (forged by the harness)")
                return
            answer, error = msg.get("answer"), msg.get("error")
            w.rollout.answer = answer if isinstance(answer, str) else None
            w.rollout.error = None if error is None else str(error)[:MAX_ERROR_CHARS]
            if w.rollout.answer is not None and len(w.rollout.answer) > self.limits.max_answer_chars:
                w.rollout.error = (
                    f"output too large: run() returned {len(w.rollout.answer)} characters "
                    f"(limit {self.limits.max_answer_chars})"
                )
                w.rollout.answer = None
            w.rollout.logs = capped_logs(msg.get("logs"))
            w.rollout.timings["harness_s"] = float(msg.get("harness_s", 0.0))
            w.retire = w.retire or msg.get("retire") is not False
            w.job = None
            return
        self._protocol_error(w, f"unexpected message {str(op)[:40]!r}")

    def _note_sandbox(self, w: WorkerProcess, status: Any) -> None:
        w.sandbox, w.resumed = (status if isinstance(status, dict) else {}), time.monotonic()  # step clock on
        self.sandbox = w.sandbox
        problems = sandbox_status_problems(status)
        self.sandbox_problems += [p for p in problems if p not in self.sandbox_problems]
        report_degraded(problems, "harness workers")

    def _requests_of(self, w: WorkerProcess) -> list[GenerationRequest]:
        params = chat_params(w.request, self.sampling, self.limits)
        n = w.request.get("n", 1)
        seeds = [call_seed(self.seed, w.job, len(w.rollout.calls) + k) for k in range(n)]
        return [GenerationRequest(w.request["messages"], params, seed, w.job.logprobs) for seed in seeds]

    def _serve_model(self, waiting: list[WorkerProcess]) -> None:
        requests, owners = [], []
        for w in waiting:
            for req in self._requests_of(w):
                requests.append(req)
                owners.append(w)
        self.engine_calls += 1
        with timed("engine"):
            generations = self.engine.generate(requests, seed=self.seed * 1_000_003 + self.engine_calls)
        answers: dict[int, list[tuple[GenerationRequest, Generation]]] = {}
        for w, req, g in zip(owners, requests, generations, strict=True):
            answers.setdefault(id(w), []).append((req, g))
        for w in waiting:
            self._reply(w, answers[id(w)])

    def _submit_model(self, w: WorkerProcess) -> None:
        requests = self._requests_of(w)
        self.engine_calls += 1
        w.results = [None] * len(requests)
        for k, req in enumerate(requests):
            handle = self.engine.submit(req, self.seed * 1_000_003 + self.engine_calls)
            w.handles[handle] = (k, req)
            self._owners[handle] = w

    def _step_model(self) -> None:
        with timed("engine"):
            finished = self.engine.step()
        for handle, generation in finished:
            w = self._owners.pop(handle)
            k, req = w.handles.pop(handle)
            w.results[k] = (req, generation)
            if not w.handles:
                results, w.results = w.results, []
                self._reply(w, results)

    def _cancel_model(self, w: WorkerProcess) -> None:
        if w.handles:
            self.engine.cancel(set(w.handles))
            for handle in w.handles:
                self._owners.pop(handle, None)
        w.handles, w.results = {}, []

    def _reply(self, w: WorkerProcess, answers: list[tuple[GenerationRequest, Generation]]) -> None:
        """Record a served chat request's calls in the rollout and send the texts to the harness."""
        texts = []
        train = bool(w.request.get("train", True))
        for req, g in answers:
            p = req.params
            recorded = {"temperature": p.temperature, "top_p": p.top_p, "top_k": p.top_k,
                        "max_tokens": p.max_tokens, "stop": list(p.stop), "seed": req.seed}  # fmt: skip
            call = ModelCall(
                req.messages, g.prompt_ids, g.completion_ids, g.text, g.finish_reason, train, recorded,
                usage=g.usage, logprobs=g.logprobs if req.logprobs else None,
            )  # fmt: skip
            w.rollout.calls.append(call)
            texts.append(g.text)
        w.request, w.resumed = None, time.monotonic()
        self._send(w, {"op": "chat_result", "texts": texts})

    def _serve_tool(self, w: WorkerProcess, msg: dict[str, Any]) -> None:
        calls, cap = w.rollout.tool_calls, self.limits.max_tool_calls
        if len(calls) >= cap:
            # Only the first refusal is recorded, and the step clock runs on: spinning is not progress.
            message = f"rollout exceeded {cap} tool calls"
            if len(calls) == cap:
                name, made = str(msg.get("name"))[:100], len(w.rollout.calls)
                calls.append(ToolCall(name, [], {}, error=message, after_calls=made))
            self._send(w, {"op": "error", "message": message})
            return
        w.tool_name, w.tool_began = str(msg.get("name"))[:100], time.monotonic()
        w.tool = self.tools.submit(w.toolbox, msg, self.limits)

    def _tool_done(self, w: WorkerProcess) -> None:
        future, w.tool = w.tool, None
        error = future.exception()
        if error is None:
            call = future.result()
        else:  # a tool that raised SystemExit or KeyboardInterrupt: run_tool catches the rest
            call = ToolCall(w.tool_name, [], {}, error=f"tool {w.tool_name} failed: {type(error).__name__}")
        call.after_calls = len(w.rollout.calls)
        w.rollout.tool_calls.append(call)
        w.resumed = time.monotonic()
        if call.error is not None:
            self._send(w, {"op": "error", "message": call.error})
        else:
            self._send(w, {"op": "tool_result", "value": call.result})

    def _next_deadline(self, busy: dict[int, tuple[int, WorkerProcess]]) -> float:
        now = time.monotonic()
        deadlines = [deadline(w, self.limits) - now for _, w in busy.values()]
        return max(0.0, min(deadlines, default=0.5))

    def _finish(self, w: WorkerProcess, busy: dict, fd: int) -> Rollout:
        self._cancel_model(w)
        if w.tool is not None:  # abandoned: its result is dropped when it comes
            w.tool.cancel()
            w.tool = None
        rollout = w.rollout
        self.selector.unregister(fd)
        del busy[fd]
        if rollout.error is None and w.verify:
            try:
                reward = float(self.domain.verify(w.task, rollout.answer, w.toolbox))
            except Exception as exc:  # noqa: BLE001 - a harness-chosen answer must not crash the run
                rollout.error = f"verify: the verifier raised {type(exc).__name__}: {str(exc)[:300]}"
            else:
                if 0.0 <= reward <= 1.0:  # NaN fails this too
                    rollout.reward = reward
                else:
                    rollout.error = f"verify: the verifier returned {reward!r}, outside [0, 1]"
        rollout.timings["wall_s"] = time.monotonic() - w.began
        w.rollout, w.toolbox, w.task, w.served = None, None, None, w.served + 1
        reusable = rollout.error is None or rollout.error.startswith(REUSABLE_AFTER)
        if reusable and not w.retire and w.proc.poll() is None and w.served < self.limits.rollouts_per_worker:
            self.idle.append(w)
            keep = self.limits.workers if self.limits.idle_workers is None else self.limits.idle_workers
            while len(self.idle) > keep:  # the longest idle goes first
                kill_worker(self.idle.pop(0))
        else:
            kill_worker(w)
        return rollout

    def _fail(self, w: WorkerProcess, busy: dict, fd: int, reason: str) -> Rollout:
        kill_worker(w)
        w.rollout.error = reason
        w.job = None
        return self._finish(w, busy, fd)
