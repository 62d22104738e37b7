"""The engine seam: what every generation backend (HF in-process, vLLM, remote) must provide."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    """Sampling semantics shared by every engine; meanings follow HF/vLLM (0 disables top_k)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 64
    stop: tuple[str, ...] = ()


@dataclass
class GenerationRequest:
    messages: list[dict[str, str]]
    params: SamplingParams = field(default_factory=SamplingParams)
    # A per-request seed makes the sample independent of which other requests share the batch (as
    # vLLM's SamplingParams.seed); None falls back to the batch seed given to generate().
    seed: int | None = None
    # Ask for the log-probability of every sampled token (see Generation.logprobs).
    logprobs: bool = False


@dataclass
class Generation:
    """One sampled completion, with the exact token ids the model saw and produced."""

    text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    finish_reason: str  # "stop" (stop string), "eos", "length", or "scripted" (a replay's, no engine)
    # When requested: log p(token) for each completion token under the model's next-token distribution
    # at the request's temperature (log_softmax(logits / T); T <= 0 counts as 1), before top-k/top-p
    # truncation. This is the quantity `whale.model.trainer.target_logprobs` computes, so a policy
    # gradient's importance ratio compares like with like.
    logprobs: list[float] | None = None
    # Token counts as a remote server reported them ({"prompt_tokens", "completion_tokens"}); the only
    # count there is when the server returns no token ids. None for in-process engines.
    usage: dict[str, int] | None = None


class Engine(Protocol):
    """Generates completions for many requests at once; records exact token ids."""

    weights_version: str

    def generate(self, requests: list[GenerationRequest], seed: int) -> list[Generation]: ...


@runtime_checkable
class StepEngine(Engine, Protocol):
    """An engine that takes requests one at a time (continuous batching, FastEngine): the runner submits
    each model call as it arrives and steps the engine between polls of the workers."""

    @property
    def busy(self) -> bool:
        """Whether any submitted request is still decoding."""
        ...

    def submit(self, request: GenerationRequest, seed: int) -> int: ...

    def step(self) -> list[tuple[int, Generation]]:
        """One decoding step; the requests it finished, by the handle `submit` gave them."""
        ...

    def cancel(self, handles: set[int] | None = None) -> None: ...


def request_seed(request: GenerationRequest, batch_seed: int, index: int) -> int:
    """The request's own seed; without one, a seed derived from the batch seed and the request's place,
    for engines that seed each request separately (vLLM, remote servers) rather than per batch."""
    if request.seed is not None:
        return request.seed
    key = f"{batch_seed}:{index}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") & ((1 << 63) - 1)
