"""`whale serve`: an agent bundle behind HTTP on 127.0.0.1, standard library only.

    GET  /health  -> {"status": "ok", "agent", "weights", "harness", "domain", "requests", "batches",
                      "largest_batch"}
    POST /run     {"inputs": {...task inputs...}} or {"task_id": "<a task of the domain>"}
                  -> {"agent", "answer", "error", "reward", "trace"}

Handler threads only parse and queue. One batching thread takes everything pending and runs it through
one `Agent.run_many`, so concurrent requests share the engine's batches the way rollouts do in training,
and the model and sandbox workers are only ever touched by that thread. Errors are JSON too:
{"error": "<one line>"} with status 400 (bad request), 404, 411, 413 or 500.
"""

from __future__ import annotations

import json
import queue
import signal
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from whale.core.config import ConfigError
from whale.deploy.agent import Agent, AgentAnswer, task_from_inputs
from whale.harness.task import Task

HOST = "127.0.0.1"
MAX_BODY = 1 << 20
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


class AgentServer(ThreadingHTTPServer):
    """Listens as soon as it is made (a taken port fails before the model loads); `start(agent)` before
    serving."""

    daemon_threads = True
    agent: Agent
    batcher: Batcher

    def __init__(self, port: int = 0):
        super().__init__((HOST, port), Handler)

    def start(self, agent: Agent) -> None:
        self.agent = agent
        self.batcher = Batcher(agent)

    def health(self) -> dict[str, Any]:
        m, b = self.agent.manifest, self.batcher
        return {
            "status": "ok", "agent": m["agent"], "weights": m["weights"], "harness": m["harness"],
            "domain": m["domain"]["name"], "requests": b.requests, "batches": b.batches,
            "largest_batch": b.largest_batch,
        }  # fmt: skip

    def task_from_request(self, body: bytes) -> Task:
        """The task a POST /run body asks for; ValueError (one line) when it asks for none."""
        try:
            request = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"request body: invalid JSON ({str(exc).splitlines()[0][:120]})") from None
        if not isinstance(request, dict) or set(request) not in ({"inputs"}, {"task_id"}):
            raise ValueError('request body: expected {"inputs": {...}} or {"task_id": "..."}')
        if "task_id" in request:
            return self.agent.domain_task(str(request["task_id"]))
        return task_from_inputs(request["inputs"], "inputs")


class Handler(BaseHTTPRequestHandler):
    server: AgentServer
    server_version = "whale"

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        if self.path != "/health":
            self._reply(404, {"error": f"{self.path}: no such route (GET /health, POST /run)"})
            return
        self._reply(200, self.server.health())

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        if self.path != "/run":
            self._reply(404, {"error": f"{self.path}: no such route (GET /health, POST /run)"})
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._reply(411, {"error": "request body: Content-Length required"})
            return
        if int(length) > MAX_BODY:
            self._reply(413, {"error": f"request body: {length} bytes (limit {MAX_BODY})"})
            return
        try:
            task = self.server.task_from_request(self.rfile.read(int(length)))
        except ValueError as exc:
            self._reply(400, {"error": str(exc)})
            return
        try:
            answer: AgentAnswer = self.server.batcher.submit(task).result()
        except Exception as exc:  # noqa: BLE001 - reported to the client, the server stays up
            self._reply(500, {"error": f"the agent failed: {type(exc).__name__}: {str(exc)[:300]}"})
            return
        self._reply(200, answer.to_json())

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server signature
        """Quiet: one line per request on stderr would drown the console."""


def serve(folder: Path, port: int, temperature: float | None, announce: Any = print) -> None:
    """Serve the bundle until SIGINT or SIGTERM; stops the sandbox workers on the way out."""
    from whale.deploy.agent import load_agent

    try:
        server = AgentServer(port)
    except OSError as exc:
        raise ConfigError(f"--port {port}: cannot listen on {HOST} ({exc.strerror or exc})") from None
    try:
        agent = load_agent(folder, temperature)
    except BaseException:
        server.server_close()
        raise
    server.start(agent)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    announce(f"serving agent {agent.version} on http://{HOST}:{server.server_port} (GET /health, POST /run)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.batcher.close()
        agent.close()
    announce("stopped")
