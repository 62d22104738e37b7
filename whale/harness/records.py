"""What a rollout leaves behind: every model call with exact token ids, every tool call, the outcome."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ModelCall:
    messages: list[dict[str, str]]
    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    finish_reason: str
    train: bool
    params: dict[str, Any]
    # Per completion token, the sampling log-probability (Generation.logprobs); recorded only for rollouts
    # that ask for it (GRPO training), and left out of the JSON otherwise so other traces do not grow.
    logprobs: list[float] | None = None
    usage: dict[str, int] | None = None  # a remote server's token counts (see Generation.usage)


@dataclass
class ToolCall:
    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    result: Any = None
    error: str | None = None
    after_calls: int | None = None  # model calls the rollout had made when this tool ran (None: not known)


@dataclass
class Rollout:
    task_id: str
    harness_id: str
    weights_version: str
    sample: int
    answer: str | None = None
    reward: float = 0.0
    error: str | None = None
    calls: list[ModelCall] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    rescue: dict[str, Any] | None = None  # a weight step's rescue rollout (whale/weights/rescue.py)

    @property
    def generated_tokens(self) -> int:
        return sum(len(c.completion_ids) or (c.usage or {}).get("completion_tokens", 0) for c in self.calls)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if d["rescue"] is None:
            del d["rescue"]
        for call in d["calls"]:
            if call["logprobs"] is None:
                del call["logprobs"]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Rollout:
        d = dict(d)
        d["calls"] = [ModelCall(**c) for c in d.get("calls", [])]
        d["tool_calls"] = [ToolCall(**t) for t in d.get("tool_calls", [])]
        return cls(**d)


@dataclass(frozen=True)
class HarnessCandidate:
    """A harness file and where it came from; the id is stable and names its archive folder."""

    id: str
    source: str
    parent: str | None = None
    hypothesis: str = ""
    proposer: str = "seed"
    # Mixed into its model calls' seeds when set, so that it draws its own random numbers instead of
    # sharing them with every candidate (the harness-resample control's copies of the incumbent).
    salt: str = ""
