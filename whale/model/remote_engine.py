"""Any OpenAI-compatible server as whale's engine: `/v1/chat/completions` through the openai client.

Made for serving-only use: harness-only runs and evaluations against a model someone else serves. The
requests of one batch go out in parallel (`engine.remote.concurrency` at a time); a 429, a 5xx, a
timeout or a dropped connection is re-sent after a backoff that doubles (`retries`, `backoff_s`); any
other error status fails at once. Each call records what the protocol returned: the text, the finish
reason, the server's token counts (`usage`) and, when the server gives them, the token ids (vLLM's
`return_token_ids`) and the sampled tokens' log-probabilities. A plain OpenAI server returns no ids, so
its calls carry empty id lists and can never become training examples.

Weight phases need exact ids and a server that follows the trainer: they are refused at start-up unless
`engine.remote.token_ids` is on, the server returns ids, and the weights are LoRA. After each weight step
the adapter is written under `engine.remote.sync_dir` (a folder the server can read) and loaded through
vLLM's `/v1/load_lora_adapter` (the server runs with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True); requests then
name the adapter as their model.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from whale.core.config import RemoteConfig
from whale.core.openai_http import EndpointError, api_key_from_env, chat_url, parse_json, post_json
from whale.model.engine import Generation, GenerationRequest, SamplingParams, request_seed
from whale.model.weight_sync import SyncFolders, lora_rank, save_for_serving


def request_body(model: str, request: GenerationRequest, seed: int, token_ids: bool) -> dict[str, Any]:
    """The chat-completions body for one request; vLLM's extensions are sent only when they are used
    (top_k when it is on, return_token_ids when asked), so a plain OpenAI server accepts the rest."""
    p = request.params
    body: dict[str, Any] = {
        "model": model,
        "messages": request.messages,
        "temperature": max(p.temperature, 0.0),
        "top_p": p.top_p,
        "max_tokens": p.max_tokens,
        "seed": seed,
        "n": 1,
    }
    if p.stop:
        body["stop"] = list(p.stop)
    if p.top_k > 0:
        body["top_k"] = p.top_k
    if token_ids:
        body["return_token_ids"] = True
    if request.logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = 0
    return body


def remote_finish_reason(choice: dict[str, Any], params: SamplingParams) -> str:
    """whale's finish reason. vLLM says which stop it was (`stop_reason`: a string for a stop string,
    null for end of sequence); a plain OpenAI server says only "stop", which is read as a stop string
    when the request had any, else as end of sequence. Other reasons are kept as the server gave them."""
    reason = str(choice.get("finish_reason") or "stop")
    if reason != "stop":
        return reason
    if "stop_reason" in choice:
        return "stop" if isinstance(choice["stop_reason"], str) else "eos"
    return "stop" if params.stop else "eos"


def generation_from_reply(data: Any, request: GenerationRequest, url: str) -> Generation:
    """A whale Generation from one chat-completions answer; a malformed answer is an EndpointError."""
    try:
        choice = data["choices"][0]
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise EndpointError(f"the answer from {url} has no choices[0].message: {str(data)[:300]}") from exc
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    counts = {k: usage[k] for k in ("prompt_tokens", "completion_tokens") if isinstance(usage.get(k), int)}
    logprobs = None
    given = choice.get("logprobs")
    entries = given.get("content") if isinstance(given, dict) else None
    if request.logprobs and isinstance(entries, list):
        logprobs = [float(e["logprob"]) for e in entries]
    return Generation(
        text=content or "",
        prompt_ids=_ids(data.get("prompt_token_ids")),
        completion_ids=_ids(choice.get("token_ids")),
        finish_reason=remote_finish_reason(choice, request.params),
        logprobs=logprobs,
        usage=counts or None,
    )


def _ids(value: Any) -> list[int]:
    return [int(t) for t in value] if isinstance(value, list) else []


class RemoteEngine:
    """whale's Engine over an OpenAI-compatible server (see the module docstring)."""

    dtype = "unknown"  # the server's business

    def __init__(self, cfg: RemoteConfig, model: Any = None, weights_version: str = "w0"):
        self.cfg = cfg
        self.url = chat_url(cfg.base_url, "engine.remote.base_url")
        self.root = self.url.removesuffix("/chat/completions")
        self.api_key = api_key_from_env(cfg.api_key_env, "engine.remote.api_key_env")
        self.model = model  # the trainer's model: where new adapters come from
        self.served_model = cfg.model
        self.folders: SyncFolders | None = None
        self.weights_version = weights_version  # set by the experiment after each weight step
        self._served = weights_version  # the version the server holds now
        self.pool = ThreadPoolExecutor(cfg.concurrency, thread_name_prefix="whale-remote")
        self.tokens_generated = 0
        self.usage_mismatches = 0  # replies whose reported completion_tokens differ from their token ids

    def generate(self, requests: list[GenerationRequest], seed: int) -> list[Generation]:
        self.sync_weights()
        futures = [self.pool.submit(self._one, r, request_seed(r, seed, i)) for i, r in enumerate(requests)]
        out = [f.result() for f in futures]
        self.tokens_generated += sum(
            len(g.completion_ids) or (g.usage or {}).get("completion_tokens", 0) for g in out
        )
        return out

    def _one(self, request: GenerationRequest, seed: int) -> Generation:
        body = request_body(self.served_model, request, seed, self.cfg.token_ids)
        g = generation_from_reply(parse_json(self._post(self.url, body), self.url), request, self.url)
        if self.cfg.token_ids and not (g.prompt_ids and g.completion_ids):
            raise EndpointError(
                f"{self.url} returned no token ids although engine.remote.token_ids is on "
                "(a vLLM server returns them; others cannot)"
            )
        reported = (g.usage or {}).get("completion_tokens")
        if g.completion_ids and reported is not None and reported != len(g.completion_ids):
            self.usage_mismatches += 1  # whale's own count (the ids) is the one budgets use
            if self.usage_mismatches == 1:
                gap = reported - len(g.completion_ids)
                print(f"whale: warning: {self.url} reports {reported} completion tokens for a reply of "
                      f"{len(g.completion_ids)} token ids (counts {gap} more); whale counts the ids",
                      file=sys.stderr)  # fmt: skip
        return g

    def _post(self, url: str, body: dict[str, Any]) -> bytes:
        cfg = self.cfg
        return post_json(url, body, self.api_key, cfg.timeout_s, cfg.retries, cfg.backoff_s)

    def check_token_ids(self) -> str:
        """Why this server cannot feed weight phases ("" when it can): one short request must return
        its prompt and completion token ids."""
        probe = GenerationRequest([{"role": "user", "content": "Say OK."}], SamplingParams(max_tokens=1))
        try:
            self._one(probe, 0)
        except EndpointError as exc:
            return str(exc)
        return ""

    def sync_weights(self) -> None:
        """Load the trainer's new adapter into the server and serve requests with it (weight phases)."""
        if self._served == self.weights_version:
            return
        if self.model is None or lora_rank(self.model) is None:
            raise EndpointError("a remote server can follow the trainer only through LoRA adapters")
        self.folders = self.folders or SyncFolders(self.cfg.sync_dir)
        _, folder = self.folders.next(self.weights_version)
        save_for_serving(self.model, folder)
        name = f"whale-{self.weights_version}"
        self._post(self.root + "/load_lora_adapter", {"lora_name": name, "lora_path": str(folder.resolve())})
        if self.served_model != self.cfg.model:
            self._post(self.root + "/unload_lora_adapter", {"lora_name": self.served_model})
        self.served_model = name
        self.folders.done(folder)
        self._served = self.weights_version

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self.folders is not None:
            self.folders.close()


def weight_phase_problem(engine: RemoteEngine, lora: bool) -> str:
    """Why this server cannot feed weight phases ("" when it can); see the module docstring."""
    if not engine.cfg.token_ids:
        return (
            "engine.kind=remote is for harness-only runs (schedule.method=harness-only): weight phases "
            "train on exact token ids, which need engine.remote.token_ids=true and a vLLM server"
        )
    if not lora:
        return "a remote server follows the trainer only through LoRA adapters: set weights.lora=true"
    problem = engine.check_token_ids()
    return f"engine.remote.token_ids: {problem}" if problem else ""
