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
    # The harness's own say (llm.credit) whether this call produced the answer; None leaves it to the trace.
    credit: bool | None = None


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
    """One harness run on one task. A failed one's `error` is '<kind>: <detail>', with one of these kinds
    (stable; match on them):

      timeout           the step, tool or rollout wall-clock limit ran out; the worker was killed
      cpu limit         the worker used up its CPU seconds (RLIMIT_CPU, SIGXCPU)
      memory limit      MemoryError under the worker's address-space limit
      recursion limit   RecursionError
      killed            SIGKILL the runner did not send (the kernel's OOM killer, an operator)
      forbidden         the harness attempted what the sandbox refuses, even if it caught the refusal:
                        'forbidden: open', 'forbidden: os.system', "forbidden: import of 'os' (ImportError)",
                        'forbidden: changed shared state: collections.Counter.most_common', ...
      output too large  the answer is over `max_answer_chars`
      protocol          the worker broke the wire protocol: a message over the 4 MiB frame limit
                        ('protocol: output too large: ...'), malformed JSON, a forged done message
      crash             the harness raised ('crash: ValueError: boom', 'crash: SystemExit: 0') or the
                        worker died ('crash: worker died on signal SIGSEGV')
      invalid           the harness breaks the contract (syntax error, no run(), a non-string result)
      verify            the domain's verifier raised on the answer
    """

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
            for key in ("logprobs", "credit"):
                if call[key] is None:
                    del call[key]
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
