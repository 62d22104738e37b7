"""A real OpenAI-compatible chat server on 127.0.0.1 for tests: scripted replies, recorded requests.

    with ScriptedOpenAI([chat_reply("hello", tokens=12), (500, "overloaded")]) as server:
        ... POST server.url + "/chat/completions" ...
        server.requests[0]["body"]["messages"]

Each POST takes the next scripted reply: a dict is sent as JSON with status 200, a (status, text) pair is
sent as it is, a float sleeps that many seconds and then takes the next reply. When the script is used up
the server answers 503.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def chat_reply(
    content: str, tokens: int | None = 100, cost: float | None = None, finish: str = "stop"
) -> dict:
    """An OpenAI-format chat completion holding `content`."""
    reply: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
        ],
    }
    if tokens is not None:
        reply["usage"] = {"prompt_tokens": tokens // 2, "completion_tokens": tokens - tokens // 2}
        reply["usage"]["total_tokens"] = tokens
        if cost is not None:
            reply["usage"]["cost"] = cost
    return reply


class ScriptedOpenAI:
    def __init__(self, script: list[Any]):
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []  # path, headers (lower-case names), body (parsed JSON)
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                with server.lock:
                    server.requests.append(
                        {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                         "body": body}
                    )  # fmt: skip
                step = server.next_step()
                while isinstance(step, (int, float)) and not isinstance(step, bool):
                    time.sleep(step)
                    step = server.next_step()
                status, payload = (200, json.dumps(step)) if isinstance(step, dict) else step
                reply(self, status, payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def next_step(self) -> Any:
        with self.lock:
            return self.script.pop(0) if self.script else (503, "script used up")

    def __enter__(self) -> ScriptedOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def reply(handler: BaseHTTPRequestHandler, status: int, text: str) -> None:
    """Send a JSON body; a client that gave up (a timeout test) is not an error of the server."""
    data = text.encode()
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    except OSError:
        pass
