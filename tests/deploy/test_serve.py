"""`whale serve` as a real process on 127.0.0.1: answers as the run's evaluation did, batches concurrent
requests through one engine, refuses bad requests with one JSON line (a foreign Host, a non-JSON post,
a slow body), and stops cleanly on SIGTERM."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cli.test_cli import ENV, assert_user_error, whale
from tests.processes import alive
from whale.core.files import read_jsonl

pytestmark = pytest.mark.slow


def call(url: str, body: bytes | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def children(pid: int) -> list[int]:
    """Every live descendant of `pid` (the sandbox workers start their own sessions, not their own trees)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found += kids
        frontier += kids
    return found


def raw(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> tuple:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request(method, path, body, headers or {})
    reply = connection.getresponse()
    return reply.status, json.loads(reply.read())


def test_serve_answers_like_the_run_batches_and_stops(agent_run, agent_bundle):
    proc = subprocess.Popen(
        [sys.executable, "-m", "whale.cli", "serve", str(agent_bundle), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        assert "serving agent w4-c0000 on http://127.0.0.1:" in line, line + proc.stderr.read()[-2000:]
        url = line.split(" on ")[1].split()[0]
        port = int(url.rsplit(":", 1)[1])
        slow = socket.create_connection(("127.0.0.1", port))  # declares 10 bytes of body, sends 1
        slow.sendall(f"POST /run HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                     "Content-Length: 10\r\n\r\n{".encode())  # fmt: skip

        status, health = call(f"{url}/health")
        assert status == 200 and health["status"] == "ok" and health["agent"] == "w4-c0000"
        assert health["requests"] == 0

        evaluated = read_jsonl(agent_run / "evals" / "002" / "test.jsonl")
        bodies = [{"inputs": {"question": r["calls"][0]["messages"][0]["content"]}} for r in evaluated]
        bodies += [{"task_id": r["task_id"]} for r in evaluated]
        with ThreadPoolExecutor(len(bodies)) as pool:
            replies = list(pool.map(lambda b: call(f"{url}/run", json.dumps(b).encode()), bodies))
        for (status, reply), want in zip(replies, evaluated * 2, strict=True):
            assert status == 200, reply
            assert reply["answer"] == want["answer"] and reply["answer"] and reply["error"] is None
            assert reply["trace"]["calls"][0]["completion_ids"] == want["calls"][0]["completion_ids"]
        assert [r["reward"] for _, r in replies] == [None] * 3 + [r["reward"] for r in evaluated]

        _, health = call(f"{url}/health")
        assert health["requests"] == len(bodies)
        assert health["batches"] < len(bodies) and health["largest_batch"] >= 2  # concurrent ones shared

        for body, words in (
            (b"{oops", "request body: invalid JSON"),
            (b'{"question": "2+2?"}', 'expected {"inputs": {...}} or {"task_id": "..."}'),
            (b'{"inputs": "2+2?"}', "inputs: expected a JSON object of task inputs, got str"),
            (b'{"task_id": "math-test-99"}', "task_id 'math-test-99': no such task in domain math"),
        ):
            status, reply = call(f"{url}/run", body)
            assert status == 400 and words in reply["error"] and "\n" not in reply["error"], reply
        assert call(f"{url}/nope")[0] == 404
        status, crashed = call(f"{url}/run", b'{"inputs": {"not_the_question": "2+2?"}}')
        assert status == 500 and crashed["error"].startswith("crash: KeyError") and crashed["answer"] is None
        assert raw(port, "GET", "/health", headers={"Host": "evil.example"})[0] == 421  # DNS rebinding
        assert raw(port, "POST", "/run", b"{}", {"Content-Type": "text/plain"})[0] == 415  # a form post
        assert raw(port, "GET", "/run")[0] == 405
        slow.settimeout(60)
        assert slow.recv(100).startswith(b"HTTP/1.1 408 ")  # the slow client is cut off, others were served
        slow.close()
        assert proc.poll() is None  # bad requests do not take the server down

        workers = children(proc.pid)
        assert workers  # the sandbox workers that ran the harness
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "stopped" in proc.stdout.read()
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in workers)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_taken_port_is_one_line(agent_bundle):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = whale("serve", str(agent_bundle), "--port", str(port))
        assert_user_error(refused, f"--port {port}: cannot listen on 127.0.0.1")
