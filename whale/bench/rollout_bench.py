"""The rollout bench: RolloutRunner with a multi-call harness on the math domain, and how much of its wall
time is spent outside the engine (sandbox, IPC, tools)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from whale.bench.engine_bench import bench_prompts
from whale.bench.machine import vm_hwm_mib
from whale.bench.settings import (
    SEED,
    BenchSettings,
)

# Three model calls and one calculator call per rollout; MAX_TOKENS is filled in by the bench.
BENCH_HARNESS = '''\
"""Bench harness: plan, check, answer (three llm.chat calls) around one calculator call."""

import re

MAX_TOKENS = __MAX_TOKENS__


def last_number(text):
    found = re.findall(r"-?\\d+(?:\\.\\d+)?", text)
    return found[-1] if found else None


def run(task, llm, tools):
    question = task["question"]
    messages = [
        {"role": "system", "content": "You are a careful math tutor."},
        {"role": "user", "content": question + " Write one arithmetic expression for the answer."},
    ]
    plan = llm.chat(messages, max_tokens=MAX_TOKENS)
    found = re.search(r"\\d+(?:\\s*[-+*/]\\s*\\d+)+", plan)
    expression = found.group(0) if found else " + ".join(re.findall(r"\\d+", question)[:2]) or "0"
    try:
        value = tools.calculator(expression)
    except Exception:
        value = "no value"
    messages = messages + [
        {"role": "assistant", "content": plan},
        {"role": "user", "content": "A calculator gives " + value + ". Check the steps briefly."},
    ]
    check = llm.chat(messages, max_tokens=MAX_TOKENS)
    messages = messages + [
        {"role": "assistant", "content": check},
        {"role": "user", "content": "Give the final answer as a number."},
    ]
    final = llm.chat(messages, max_tokens=MAX_TOKENS)
    return last_number(final) or last_number(check) or last_number(value) or "0"
'''


class TimedEngine:
    """Wraps an engine: every generate call is timed, and its requests and tokens counted."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.weights_version = engine.weights_version
        self.reset()

    def reset(self) -> None:
        self.seconds, self.calls, self.requests, self.tokens, self.prompt_tokens = 0.0, 0, 0, 0, 0
        self.batch_sizes: list[int] = []

    def generate(self, requests: list[Any], seed: int) -> list[Any]:
        start = time.perf_counter()
        out = self.engine.generate(requests, seed)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        self.requests += len(requests)
        self.batch_sizes.append(len(requests))
        self._count(out)
        return out

    def _count(self, out: list[Any]) -> None:
        self.tokens += sum(len(g.completion_ids) for g in out)
        self.prompt_tokens += sum(len(g.prompt_ids) for g in out)


class TimedStepEngine(TimedEngine):
    """TimedEngine for an engine that takes requests one by one: the runner then batches continuously,
    and the time inside `step` is the engine's time."""

    def reset(self) -> None:
        super().reset()
        self.live: set[int] = set()  # handles submitted and not yet finished: a step's batch, on any engine

    @property
    def busy(self) -> bool:
        return self.engine.busy

    def submit(self, request: Any, seed: int) -> int:
        self.requests += 1
        handle = self.engine.submit(request, seed)
        self.live.add(handle)
        return handle

    def cancel(self, handles: set[int] | None = None) -> None:
        self.engine.cancel(handles)
        self.live = set() if handles is None else self.live - handles

    def step(self) -> list[tuple[int, Any]]:
        self.batch_sizes.append(len(self.live))
        start = time.perf_counter()
        done = self.engine.step()
        self.seconds += time.perf_counter() - start
        self.calls += 1
        self.live -= {handle for handle, _ in done}
        self._count([g for _, g in done])
        return done


def bench_rollout(
    model: Any, tokenizer: Any, settings: BenchSettings, log: Callable[[str], None]
) -> dict[str, Any]:
    from whale.core.config import Config
    from whale.domains.math import MathDomain
    from whale.harness.calls import RolloutJob, RunnerLimits
    from whale.harness.records import HarnessCandidate
    from whale.harness.runner import RolloutRunner
    from whale.model.backends import build_engine
    from whale.model.engine import GenerationRequest, SamplingParams

    base = Config()
    inner = build_engine(base.engine, model, tokenizer, base.model.max_batch)
    # Untimed warm-up after the trainer's allocations: cold and warm runs then differ only in workers.
    inner.generate([GenerationRequest(m, SamplingParams(0.0, max_tokens=2)) for m in bench_prompts(2)], SEED)
    continuous = TimedStepEngine(inner)
    barrier = TimedEngine(inner)
    sizes = {"train": 1, "search": settings.rollout_tasks, "val": 1, "test": 1}
    domain = MathDomain(seed=SEED, sizes=sizes)
    tasks = domain.splits()["search"]
    s = base.sampling
    sampling = SamplingParams(s.temperature, s.top_p, s.top_k, settings.rollout_max_tokens)
    limits = RunnerLimits(workers=settings.rollout_workers, step_timeout_s=60.0)
    harness = HarnessCandidate(
        "bench", BENCH_HARNESS.replace("__MAX_TOKENS__", str(settings.rollout_max_tokens))
    )
    runner = RolloutRunner(continuous, domain, sampling, limits, seed=SEED)
    runs = {}
    try:
        # cold starts the worker processes; warm reuses them, as a run does; barrier is warm again with the
        # engine seen through generate() only: one batch once every busy worker waits (no continuous
        # batching); fresh gives every rollout a candidate of its own, so none reuses a worker (the worst
        # case of "no worker runs two candidates": a search whose candidates each run one rollout)
        for phase in ("cold", "warm", "barrier", "fresh"):
            log(f"rollout: {len(tasks)} rollouts ({phase})")
            engine = barrier if phase == "barrier" else continuous
            runner.engine, runner.continuous = engine, engine is continuous
            engine.reset()
            jobs = [
                RolloutJob(t, HarnessCandidate(f"bench-{i}", harness.source) if phase == "fresh" else harness,
                           0, salt=phase)
                for i, t in enumerate(tasks)
            ]  # fmt: skip
            start = time.perf_counter()
            rollouts = runner.run(jobs)
            wall = time.perf_counter() - start
            errors = sorted({r.error.split(":")[0] for r in rollouts if r.error})
            runs[phase] = {
                "rollouts": len(rollouts),
                "failed": sum(r.error is not None for r in rollouts),
                "error_kinds": errors,
                "model_calls": sum(len(r.calls) for r in rollouts),
                "tool_calls": sum(len(r.tool_calls) for r in rollouts),
                "wall_s": wall,
                "engine_s": engine.seconds,
                "engine_calls": engine.calls,
                "engine_requests": engine.requests,
                "engine_batch_sizes": list(engine.batch_sizes),
                "generated_tokens": engine.tokens,
                "prompt_tokens": engine.prompt_tokens,
                "tokens_per_s": engine.tokens / wall,
                "engine_tokens_per_s": engine.tokens / engine.seconds if engine.seconds else 0.0,
                "overhead": (wall - engine.seconds) / wall,
            }
        workers = [vm_hwm_mib(w.proc.pid) for w in runner.idle]  # before close() ends them
    finally:
        runner.close()
    workers = [w for w in workers if w is not None]
    return {
        "domain": "math",
        "harness": "3 llm.chat calls + 1 calculator call per rollout",
        "workers": settings.rollout_workers,
        "max_tokens": settings.rollout_max_tokens,
        "sampling": {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k},
        "engine": type(inner).__name__,
        "overhead_formula": "(wall_s - engine_s) / wall_s; engine_s sums the time inside the engine",
        "continuous_speedup": runs["barrier"]["wall_s"] / runs["warm"]["wall_s"],
        "sandbox_problems": list(runner.sandbox_problems),
        "runs": runs,
        "overhead": runs["warm"]["overhead"],
        "overhead_fresh": runs["fresh"]["overhead"],
        "worker_peak_rss_mib": {
            "count": len(workers),
            "max": max(workers, default=None),
            "sum": round(sum(workers), 1),
        },
    }
