"""The OpenAI wire format over the standard library: one place for URLs, API keys and POSTs.

Used by the LLM proposer (harness proposals) and the remote engine (rollout generation), so every
OpenAI-compatible server (vLLM, llama.cpp, a hosted API) is reached the same way, with the same errors.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request
from typing import Any


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


def post_json(url: str, body: dict[str, Any], api_key: str | None, timeout_s: float) -> bytes:
    """POST `body` as JSON and return the raw answer; every failure is an EndpointError."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500].decode("utf-8", "replace")
        raise EndpointError(f"HTTP {exc.code} from {url}: {detail}".strip(), exc.code) from exc
    except urllib.error.URLError as exc:
        raise EndpointError(f"cannot reach {url}: {exc.reason}") from exc
    except TimeoutError as exc:
        raise EndpointError(f"no answer from {url} within {timeout_s:g} s") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise EndpointError(f"connection to {url} failed: {exc!r}") from exc


def parse_json(raw: bytes, url: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        text = raw[:200].decode("utf-8", "replace")
        raise EndpointError(f"the answer from {url} is not JSON: {text!r}") from exc
