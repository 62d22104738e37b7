"""`whale serve`: an agent bundle behind HTTP on 127.0.0.1, on uvicorn and starlette.

    GET  /health  -> {"status": "ok", "agent", "weights", "harness", "domain", "requests", "batches",
                      "largest_batch"}
    POST /run     {"inputs": {...task inputs...}} or {"task_id": "<a task of the domain>"}
                  -> {"agent", "answer", "error", "reward", "trace"}

The server refuses what a web page or a slow client could abuse: a Host header other than this address
(DNS rebinding: 421), a POST that is not `application/json` (a cross-site form cannot send one without a
CORS preflight: 415), a body over MAX_BODY (413) or not received within BODY_TIMEOUT_S (408), and more
than MAX_CONNECTIONS connections at once (uvicorn answers 503); idle keep-alive connections close after
KEEP_ALIVE_S, and headers are capped at MAX_HEADER_BYTES. Errors are JSON: {"error": "<one line>"}; a
rollout that failed (the harness crashed, timed out, ...) is a 500 whose body is the answer with its
reason in "error" and the trace.

One batching thread takes everything pending and runs it through one `Agent.run_many`, so concurrent
requests share the engine's batches the way rollouts do in training, and the model and sandbox workers
are only ever touched by that thread.
"""

from __future__ import annotations

import asyncio
import json
import queue
import signal
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from whale.core.config import ConfigError
from whale.deploy.agent import Agent, task_from_inputs
from whale.harness.task import Task

HOST = "127.0.0.1"
MAX_BODY = 1 << 20
MAX_HEADER_BYTES = 16 << 10
MAX_CONNECTIONS = 64
BODY_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5
BATCH_WINDOW_S = 0.01  # after the first pending request, how long others may join its batch


@dataclass
class Batcher:
    """One thread that drains the request queue into `Agent.run_many` batches."""

    agent: Agent
    requests: int = 0
    batches: int = 0
    largest_batch: int = 0
    pending: queue.Queue = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="whale-batcher", daemon=True)
        self.thread.start()

    def submit(self, task: Task) -> Future:
        future: Future = Future()
        self.pending.put((task, future))
        return future

    def _loop(self) -> None:
        while True:
            item = self.pending.get()
            if item is None:
                return
            time.sleep(BATCH_WINDOW_S)
            batch = [item]
            while True:
                try:
                    more = self.pending.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self.pending.put(None)  # stop after this batch
                    break
                batch.append(more)
            self._run(batch)

    def _run(self, batch: list[tuple[Task, Future]]) -> None:
        self.requests += len(batch)
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(batch))
        try:
            answers = self.agent.run_many([task for task, _ in batch])
        except Exception as exc:  # noqa: BLE001 - an engine failure answers every waiting request
            for _, future in batch:
                future.set_exception(exc)
            return
        for (_, future), answer in zip(batch, answers, strict=True):
            future.set_result(answer)

    def close(self) -> None:
        self.pending.put(None)
        self.thread.join()


def health(agent: Agent, batcher: Batcher) -> dict[str, Any]:
    m = agent.manifest
    return {
        "status": "ok", "agent": m["agent"], "weights": m["weights"], "harness": m["harness"],
        "domain": m["domain"]["name"], "requests": batcher.requests, "batches": batcher.batches,
        "largest_batch": batcher.largest_batch,
    }  # fmt: skip


def task_from_request(agent: Agent, body: bytes) -> Task:
    """The task a POST /run body asks for; ValueError (one line) when it asks for none."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"request body: invalid JSON ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(request, dict) or set(request) not in ({"inputs"}, {"task_id"}):
        raise ValueError('request body: expected {"inputs": {...}} or {"task_id": "..."}')
    if "task_id" in request:
        return agent.domain_task(str(request["task_id"]))
    return task_from_inputs(request["inputs"], "inputs")


def refusal(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class HostCheck:
    """ASGI middleware: only requests addressed to this server by its own address are answered, so a
    page on another site whose name was re-pointed at 127.0.0.1 (DNS rebinding) cannot reach it."""

    def __init__(self, app: Any, port: int):
        self.app, self.address = app, f"{HOST}:{port}"
        self.hosts = {self.address, f"localhost:{port}"}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if host not in self.hosts:
                message = f"Host {host[:100]!r}: this server answers only to {self.address}"
                await refusal(421, message)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def make_app(agent: Agent, batcher: Batcher, port: int) -> HostCheck:
    async def get_health(request: Request) -> JSONResponse:
        return JSONResponse(health(agent, batcher))

    async def post_run(request: Request) -> JSONResponse:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            return refusal(415, f"request body: Content-Type must be application/json (got {kind[:60]!r})")
        length = request.headers.get("content-length", "")
        if not length.isdigit():
            return refusal(411, "request body: Content-Length required")
        if int(length) > MAX_BODY:
            return refusal(413, f"request body: {length} bytes (limit {MAX_BODY})")
        try:
            body = await asyncio.wait_for(request.body(), BODY_TIMEOUT_S)
        except TimeoutError:
            return refusal(408, f"request body: not received within {BODY_TIMEOUT_S:g} s")
        try:
            task = task_from_request(agent, body)
        except ValueError as exc:
            return refusal(400, str(exc))
        try:
            answer = await asyncio.wrap_future(batcher.submit(task))
        except Exception as exc:  # noqa: BLE001 - reported to the client, the server stays up
            return refusal(500, f"the agent failed: {type(exc).__name__}: {str(exc)[:300]}")
        return JSONResponse(answer.to_json(), status_code=500 if answer.error else 200)  # a failed rollout

    async def no_route(request: Request, exc: Exception) -> JSONResponse:
        status = getattr(exc, "status_code", 404)
        return refusal(
            status, f"{request.method} {request.url.path[:100]}: no such route (GET /health, POST /run)"
        )

    routes = [Route("/health", get_health, methods=["GET"]), Route("/run", post_run, methods=["POST"])]
    return HostCheck(Starlette(routes=routes, exception_handlers={404: no_route, 405: no_route}), port)


def listen(port: int) -> socket.socket:
    """The listening socket, before the model loads: a taken port is one line at once."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
        sock.listen(MAX_CONNECTIONS)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"--port {port}: cannot listen on {HOST} ({exc.strerror or exc})") from None
    return sock


def serve(
    folder: Path, port: int, temperature: float | None, announce: Any = print, engine: str | None = None
) -> None:
    """Serve the bundle until SIGINT or SIGTERM; stops the sandbox workers on the way out."""
    import uvicorn

    from whale.deploy.agent import load_agent

    sock = listen(port)
    try:
        agent = load_agent(folder, temperature, engine)
    except BaseException:
        sock.close()
        raise
    batcher = Batcher(agent)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        make_app(agent, batcher, port), http="h11", loop="asyncio", ws="none", lifespan="off",
        log_level="warning", access_log=False, server_header=False, limit_concurrency=MAX_CONNECTIONS,
        timeout_keep_alive=KEEP_ALIVE_S, timeout_graceful_shutdown=5,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )  # fmt: skip
    for stop in (signal.SIGINT, signal.SIGTERM):  # uvicorn re-raises the signal it stopped on: let it land
        signal.signal(stop, lambda *_: None)
    announce(f"serving agent {agent.version} on http://{HOST}:{port} (GET /health, POST /run)")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        batcher.close()
        agent.close()
    announce("stopped")
