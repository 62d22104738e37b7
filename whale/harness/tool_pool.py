"""Tool calls off the runner's loop. Domain tools run on a few threads of their own, so one rollout's slow
tool holds up no other rollout's model calls or messages; a completed call wakes the loop through a pipe
that the runner's selector watches. A call that runs over its time limit is abandoned (a thread cannot
be stopped), its rollout fails, and its result is dropped when it comes. The threads are daemons, so an
abandoned call that never returns cannot keep whale from exiting."""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import Future
from typing import Any

from whale.harness.calls import RunnerLimits, run_tool
from whale.harness.records import ToolCall
from whale.harness.task import Toolbox

MAX_THREADS = 32


class ToolPool:
    def __init__(self, threads: int):
        self.fd, self._bell = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._bell, False)
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._max = max(1, min(threads, MAX_THREADS))
        self._threads: list[threading.Thread] = []
        self._pending = 0
        self._lock = threading.Lock()  # an abandoned call may finish after close: never ring a reused fd
        self._open = True

    def submit(self, toolbox: Toolbox, msg: dict[str, Any], limits: RunnerLimits) -> Future[ToolCall]:
        future: Future[ToolCall] = Future()
        with self._lock:
            self._pending += 1
            if self._pending > len(self._threads) and len(self._threads) < self._max:
                thread = threading.Thread(target=self._work, name="whale-tool", daemon=True)
                self._threads.append(thread)
                thread.start()
        self._jobs.put((future, toolbox, msg, limits))
        return future

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            future, toolbox, msg, limits = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(run_tool(toolbox, msg, limits))
                except BaseException as exc:  # noqa: BLE001 - a tool's SystemExit must not end this thread
                    future.set_exception(exc)
            with self._lock:
                self._pending -= 1
                if self._open:
                    try:
                        os.write(self._bell, b".")
                    except BlockingIOError:
                        pass  # a full pipe wakes the loop already

    def drain(self) -> None:
        try:
            while os.read(self.fd, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        with self._lock:
            if not self._open:
                return
            self._open = False
            os.close(self.fd)
            os.close(self._bell)
        for _ in self._threads:
            self._jobs.put(None)
