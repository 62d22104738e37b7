"""What the runner is asked to do and within which limits, and the checks on each model and tool call a
harness makes: plain data and functions, so the event loop in runner.py stays about processes."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from whale.harness.records import HarnessCandidate, ModelCall, ToolCall
from whale.harness.task import Task, Toolbox, ToolError
from whale.model.engine import Generation, GenerationRequest, SamplingParams


@dataclass
class RunnerLimits:
    workers: int = 32
    idle_workers: int | None = None  # kept for reuse when they finish; None: as many as `workers`
    step_timeout_s: float = 10.0  # harness compute between two model/tool calls
    rollout_timeout_s: float = 600.0  # whole rollout, waiting included
    tool_timeout_s: float = 60.0  # one tool call, from the request (a queued call's wait included)
    memory_mb: int = 512
    cpu_s: int = 600  # per worker lifetime; workers are recycled before they reach it
    rollouts_per_worker: int = 200
    max_model_calls: int = 16
    max_tool_calls: int = 64
    max_samples_per_call: int = 16
    max_tokens_cap: int = 512
    max_prompt_chars: int = 100_000  # one llm.chat request, all message contents together
    max_stop_strings: int = 16
    max_tool_arg_chars: int = 100_000  # one tool call's arguments, as JSON
    max_tool_result_chars: int = 256_000  # one tool call's result, as JSON
    max_answer_chars: int = 100_000
    # Step the engine only when every busy rollout waits on the model: batches, and so draws, repeat from
    # run to run (bfloat16 logits change with the batch around a row; runner.lockstep in the config).
    lockstep: bool = False


@dataclass
class RolloutJob:
    task: Task
    harness: HarnessCandidate
    sample: int
    # Distinguishes otherwise identical jobs (e.g. the RFT step number), so that a task drawn again in a
    # later step gets fresh samples rather than the ones it got before.
    salt: str = ""
    # False for a task without gold data (a deployed agent answering a user): no reward is computed.
    verify: bool = True
    # Record every model call's per-token sampling log-probabilities (ModelCall.logprobs), for GRPO.
    logprobs: bool = False
    # A replay: the harness's model calls are answered from this script, never by the engine
    # (conversation key -> replies in call order; see scripted).
    script: dict[str, tuple[str, ...]] | None = None


def call_seed(seed: int, job: RolloutJob, call_index: int) -> int:
    """The seed of one model call, whatever else shares its batch: a function of the run seed, the
    job's task, sample and salt, and the call's index within the rollout. The harness id is left out
    on purpose: candidates run on the same task and sample share random numbers (common random
    numbers), so paired comparisons between them have less noise. A harness with its own salt opts out."""
    salt = f"{job.salt}|{job.harness.salt}" if job.harness.salt else job.salt
    key = json.dumps([seed, job.task.id, job.sample, salt, call_index]).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") & ((1 << 63) - 1)


def conversation_key(messages: list[dict[str, Any]]) -> str:
    """A conversation as a script key: its turns' roles and contents."""
    return json.dumps([[m.get("role"), m.get("content")] for m in messages])


def scripted(
    script: dict[str, tuple[str, ...]], requests: list[GenerationRequest], earlier: list[Any]
) -> list[tuple[GenerationRequest, Generation]]:
    """A replay's answers: the i-th call on a conversation gets the script's i-th reply for it (its last
    when the script has fewer), and a conversation the script lacks gets '' (the replay has left the
    recorded path). `earlier` holds the rollout's calls so far (anything with `.messages`)."""
    key = conversation_key(requests[0].messages)
    seen = sum(conversation_key(c.messages) == key for c in earlier)
    replies = script.get(key) or ("",)
    texts = [replies[min(seen + k, len(replies) - 1)] for k in range(len(requests))]
    return [(req, Generation(text, [], [], "scripted")) for req, text in zip(requests, texts, strict=True)]


def chat_problem(msg: dict[str, Any], calls_made: int, limits: RunnerLimits) -> str | None:
    """Why the chat request `msg` cannot be served (None when it can): shape, sizes, counts, types."""
    messages = msg.get("messages")
    ok = (
        isinstance(messages, list)
        and messages
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        )
    )
    if not ok:
        return "llm.chat: messages must be a non-empty list of {'role': str, 'content': str}"
    chars = sum(len(m["content"]) + len(m["role"]) for m in messages)
    if chars > limits.max_prompt_chars:
        return f"llm.chat: the messages are {chars} characters (limit {limits.max_prompt_chars})"
    n = msg.get("n", 1)
    if not isinstance(n, int) or not 1 <= n <= limits.max_samples_per_call:
        return f"llm.chat: n must be an int in 1..{limits.max_samples_per_call}"
    if calls_made + n > limits.max_model_calls:
        return f"llm.chat: rollout exceeded {limits.max_model_calls} model calls"
    for key, kind in (("max_tokens", int), ("temperature", (int, float))):
        if msg.get(key) is not None and not isinstance(msg[key], kind):
            return f"llm.chat: {key} has the wrong type"
    if isinstance(msg.get("temperature"), float) and not math.isfinite(msg["temperature"]):
        return "llm.chat: temperature must be a finite number"
    stop = msg.get("stop")
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) and s for s in stop)):
        return "llm.chat: stop must be a string or a list of non-empty strings"
    if stop is not None and (len(stop) > limits.max_stop_strings or sum(map(len, stop)) > 1000):
        return f"llm.chat: at most {limits.max_stop_strings} stop strings, 1000 characters in all"
    return None


def apply_credit(msg: dict[str, Any], calls: list[ModelCall]) -> str | None:
    """Record an `llm.credit` on the rollout's calls; why it cannot be (None when it was)."""
    index, keep = msg.get("calls"), msg.get("keep")
    ok = isinstance(index, list) and isinstance(keep, list) and len(index) == len(keep)
    ok = ok and all(type(i) is int and 0 <= i < len(calls) for i in index)
    if not ok or not all(type(k) is bool for k in keep):
        return (
            f"llm.credit: keep must be a bool, or one bool per call credited (the last llm.chat's samples, "
            f"or the indices in calls, of this rollout's {len(calls)} model calls)"
        )
    for i, k in zip(index, keep, strict=True):
        calls[i].credit = k
    return None


def chat_params(msg: dict[str, Any], base: SamplingParams, limits: RunnerLimits) -> SamplingParams:
    """The sampling of one chat request: the run's, with the harness's max_tokens (capped), temperature
    (clamped to [0, 2]) and stop strings."""
    max_tokens = min(int(msg.get("max_tokens") or base.max_tokens), limits.max_tokens_cap)
    temperature = (
        base.temperature if msg.get("temperature") is None else min(max(msg["temperature"], 0.0), 2.0)
    )
    return SamplingParams(
        temperature, base.top_p, base.top_k, max(1, max_tokens), tuple(msg.get("stop") or ())
    )


def run_tool(toolbox: Toolbox, msg: dict[str, Any], limits: RunnerLimits) -> ToolCall:
    """Serve the tool call `msg` asks for: its result, or the reason it was refused (never an exception:
    harness-chosen arguments must not crash the run)."""
    name, args, kwargs = msg.get("name"), msg.get("args", []), msg.get("kwargs", {})
    call = ToolCall(
        str(name)[:100],
        args if isinstance(args, list) else [],
        kwargs if isinstance(kwargs, dict) else {},
    )
    size = len(json.dumps([call.args, call.kwargs]))
    if size > limits.max_tool_arg_chars:
        call.args, call.kwargs = [f"<{size} characters of arguments dropped>"], {}
        call.error = f"tool arguments are {size} characters (limit {limits.max_tool_arg_chars})"
    elif name not in toolbox.names:
        call.error = f"unknown tool {str(name)[:40]!r}"
    else:
        try:
            call.result = toolbox.call(name, call.args, call.kwargs)
            chars = len(json.dumps(call.result))
            if chars > limits.max_tool_result_chars:
                call.error = f"tool {name} returned {chars} characters (limit {limits.max_tool_result_chars})"
        except ToolError as exc:
            call.error = str(exc)
        except (TypeError, ValueError) as exc:
            call.error = f"bad arguments for {name}: {exc}"
        except Exception as exc:  # noqa: BLE001 - harness-chosen arguments must not crash the run
            call.error = f"tool {name} failed: {type(exc).__name__}: {str(exc)[:300]}"
        if call.error is not None:
            call.result = None
    return call
