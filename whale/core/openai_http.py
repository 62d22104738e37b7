"""The OpenAI wire format through the official `openai` client: one place for URLs, API keys, POSTs,
retries and their errors.

Used by the LLM proposer (harness proposals) and the remote engine (rollout generation), so every
OpenAI-compatible server (vLLM, llama.cpp, a hosted API) is reached the same way, with the same errors.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any
from urllib.parse import urlsplit


class EndpointError(Exception):
    """The endpoint could not be reached or its answer could not be read; `status` is the HTTP status
    when the server answered with an error (429 and 5xx are worth retrying), else None."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def chat_url(base_url: str | None, field: str) -> str:
    """The chat-completions URL under `base_url`; `field` names the config key in error messages."""
    if not base_url:
        raise ValueError(f"{field} is required (e.g. http://127.0.0.1:8000/v1)")
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"{field} must start with http:// or https://, not {base_url!r}")
    base = base_url.rstrip("/")
    return base if base.endswith("/chat/completions") else base + "/chat/completions"


def api_key_from_env(env_name: str | None, field: str) -> str | None:
    """The API key held in the environment variable `env_name` (None when no variable is named)."""
    if not env_name:
        return None
    key = os.environ.get(env_name)
    if not key:
        raise ValueError(f"{field} names {env_name!r}, but that environment variable is not set")
    return key


def post_json(
    url: str,
    body: dict[str, Any],
    api_key: str | None,
    timeout_s: float,
    retries: int = 0,
    backoff_s: float = 1.0,
) -> bytes:
    """POST `body` as JSON through the official openai client and return the raw answer (every field the
    server sent, vLLM's token ids included). A 429, a 5xx, a timeout or a dropped connection is re-sent
    up to `retries` times after a wait that doubles from `backoff_s`; every failure is an EndpointError."""
    for attempt in range(retries + 1):
        try:
            return _post_once(url, body, api_key, timeout_s)
        except EndpointError as exc:
            if attempt == retries or not retryable(exc):
                tries = f" (after {attempt + 1} tries)" if attempt else ""
                raise EndpointError(f"{exc}{tries}", exc.status) from None
            time.sleep(backoff_s * 2**attempt)
    raise AssertionError("unreachable")


def retryable(exc: EndpointError) -> bool:
    """Rate limits, server errors, timeouts and dropped connections pass; other statuses do not."""
    return exc.status is None or exc.status == 429 or exc.status >= 500


_CLIENTS: dict[tuple[str, str, float], Any] = {}
_LOCK = threading.Lock()


def _client(root: str, api_key: str | None, timeout_s: float) -> Any:
    """One openai client per endpoint, key and timeout (its connection pool is shared by threads);
    retries are whale's own (above), so the client makes none."""
    import openai

    key = (root, api_key or "", timeout_s)
    with _LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = openai.OpenAI(
                base_url=root, api_key=api_key or "not-needed", timeout=timeout_s, max_retries=0
            )
        return _CLIENTS[key]


def _post_once(url: str, body: dict[str, Any], api_key: str | None, timeout_s: float) -> bytes:
    import httpx2
    import openai

    parts = urlsplit(url)
    root, path = f"{parts.scheme}://{parts.netloc}", parts.path + (f"?{parts.query}" if parts.query else "")
    try:
        reply = _client(root, api_key, timeout_s).post(path, body=body, cast_to=httpx2.Response)
        return reply.content
    except openai.APIStatusError as exc:
        detail = exc.response.text[:500]
        raise EndpointError(f"HTTP {exc.status_code} from {url}: {detail}".strip(), exc.status_code) from None
    except openai.APITimeoutError:
        raise EndpointError(f"no answer from {url} within {timeout_s:g} s") from None
    except openai.APIConnectionError as exc:
        raise EndpointError(f"cannot reach {url}: {exc.__cause__ or exc}") from None


def parse_json(raw: bytes, url: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        text = raw[:200].decode("utf-8", "replace")
        raise EndpointError(f"the answer from {url} is not JSON: {text!r}") from exc
