"""A real OpenAI-compatible server for tests, run as its own process: the tiny model through HFEngine.

    python tests/model/openai_model_server.py [--seed 0]     # prints "PORT <n>" once it listens

It speaks `/v1/chat/completions` as vLLM's server does, including vLLM's extensions (`top_k`,
`return_token_ids`, `stop_reason`, `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` with peft
adapter folders), and can pretend to be a plain OpenAI server that knows none of them. Tests steer it
through two extra routes:

    POST /control {"fail": [429, 500], "delay_s": 0.5, "plain": true, "usage_skew": 3}
                  the next answers fail with these statuses; every answer waits delay_s; plain drops
                  extensions; usage_skew is added to the completion_tokens reported; max_in_flight
                  starts anew
    GET  /stats   {"chat": n, "max_in_flight": m, "paths": [...], "models": [...]}
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from anywhere: `whale` is importable

from tests.search.openai_server import reply  # noqa: E402
from whale.model.engine import GenerationRequest, SamplingParams  # noqa: E402
from whale.model.hf_engine import HFEngine  # noqa: E402
from whale.model.loading import load_model  # noqa: E402


class ModelServer:
    def __init__(self, seed: int):
        torch.set_num_threads(1)  # the tests compare ids with a single-threaded local engine
        self.base, self.tokenizer = load_model("tiny", seed)
        self.engines: dict[str, HFEngine] = {}  # adapter name -> engine over a copy of base + adapter
        self.base_engine = HFEngine(self.base, self.tokenizer)
        self.lock = threading.Lock()  # one generation at a time; HTTP requests still overlap
        self.state_lock = threading.Lock()
        self.fail: list[int] = []
        self.delay_s = 0.0
        self.plain = False
        self.usage_skew = 0  # added to the completion_tokens the server reports (a server that miscounts)
        self.chat = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.paths: list[str] = []

    def complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body.get("model", "default")
        engine = self.engines.get(name, self.base_engine if name == "default" else None)
        if engine is None:
            return 404, {"error": {"message": f"The model `{name}` does not exist.", "code": 404}}
        top_k = 0 if self.plain else int(body.get("top_k") or 0)
        stop = body.get("stop") or []
        params = SamplingParams(
            float(body.get("temperature", 1.0)), float(body.get("top_p", 1.0)), top_k,
            int(body.get("max_tokens", 16)), tuple([stop] if isinstance(stop, str) else stop),
        )  # fmt: skip
        request = GenerationRequest(body["messages"], params, body.get("seed"), bool(body.get("logprobs")))
        with self.lock:
            (g,) = engine.generate([request], seed=0)
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": g.text},
            "finish_reason": "length" if g.finish_reason == "length" else "stop",
        }
        reply: dict[str, Any] = {
            "id": f"chatcmpl-{self.chat}",
            "object": "chat.completion",
            "model": name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(g.prompt_ids),
                "completion_tokens": len(g.completion_ids) + self.usage_skew,
                "total_tokens": len(g.prompt_ids) + len(g.completion_ids) + self.usage_skew,
            },
        }
        if request.logprobs:
            tokens = [self.tokenizer.decode([t]) for t in g.completion_ids]
            choice["logprobs"] = {
                "content": [
                    {"token": t, "logprob": lp, "top_logprobs": []}
                    for t, lp in zip(tokens, g.logprobs, strict=True)
                ]
            }
        if not self.plain:
            full = self.tokenizer.decode(g.completion_ids, skip_special_tokens=True)
            found = [s for s in params.stop if s in full]
            choice["stop_reason"] = min(found, key=full.find) if g.finish_reason == "stop" else None
            if body.get("return_token_ids"):
                choice["token_ids"] = g.completion_ids
                reply["prompt_token_ids"] = g.prompt_ids
        return 200, reply

    def load_adapter(self, body: dict[str, Any]) -> tuple[int, str]:
        from peft import PeftModel

        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path or not Path(path, "adapter_config.json").is_file():
            return 400, f"cannot load adapter {name!r} from {path!r}"
        model = PeftModel.from_pretrained(copy.deepcopy(self.base), path)
        self.engines[name] = HFEngine(model, self.tokenizer)
        return 200, f"Success: LoRA adapter '{name}' added successfully."

    def stats(self) -> dict[str, Any]:
        return {
            "chat": self.chat,
            "max_in_flight": self.max_in_flight,
            "paths": list(self.paths),
            "models": sorted(self.engines),
        }


def make_handler(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send(200, server.stats() if self.path == "/stats" else {"object": "list", "data": []})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/control":
                server.fail = list(body.get("fail", []))
                server.delay_s = float(body.get("delay_s", 0.0))
                server.plain = bool(body.get("plain", False))
                server.usage_skew = int(body.get("usage_skew", 0))
                with server.state_lock:
                    server.max_in_flight = server.in_flight
                self.send(200, {"ok": True})
                return
            with server.state_lock:
                server.paths.append(self.path)
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
                status = server.fail.pop(0) if server.fail else 200
                server.chat += status == 200 and self.path == "/v1/chat/completions"
            try:
                time.sleep(server.delay_s)
                if status != 200:
                    self.send(status, {"error": {"message": f"scripted failure {status}", "code": status}})
                elif self.path == "/v1/chat/completions":
                    self.send(*server.complete(body))
                elif self.path == "/v1/load_lora_adapter":
                    self.send(*server.load_adapter(body))
                elif self.path == "/v1/unload_lora_adapter":
                    server.engines.pop(body.get("lora_name"), None)
                    self.send(200, "Success")
                else:
                    self.send(404, {"error": {"message": f"no route {self.path}"}})
            finally:
                with server.state_lock:
                    server.in_flight -= 1

        def send(self, status: int, payload: Any) -> None:
            reply(self, status, payload if isinstance(payload, str) else json.dumps(payload))

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(ModelServer(args.seed)))
    httpd.daemon_threads = True
    print(f"PORT {httpd.server_address[1]}", flush=True)
    httpd.serve_forever(0.05)


if __name__ == "__main__":
    main()
