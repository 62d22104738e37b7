"""The rollout workload whale really runs: N tasks x k samples of each built-in domain's seed harness
through RolloutRunner, per engine kind, beside transformers' generate with num_return_sequences=k on the
same first-call prompts.

The engines see what a run gives them: per-call seeds, the k samples of a task submitted together, the
domain's tools and sandbox, and as many rollouts at once as `whale run --preset default` runs. generate
sees only each task's first model call, k times, which is the best case for it. Tokens/s counts generated
tokens; the prompt tokens each side computed say what prefill cost and how much the prefix cache saved.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from whale.bench.engine_bench import trim_at_eos
from whale.bench.settings import SEED, BenchSettings

DOMAINS = ("math", "searchqa", "chess")


def workload_kinds(model: Any) -> list[str]:
    """The engines to measure: the fast and reference engines, and vLLM where `auto` would pick it."""
    from whale.core.config import EngineConfig
    from whale.model.backends import choose_kind

    kinds = ["fast", "hf"]
    if choose_kind(EngineConfig(kind="auto"), model)[0] == "vllm":
        kinds.append("vllm")
    return kinds


def run_concurrency() -> tuple[int, int]:
    """(sandbox workers, engine batch) of `whale run --preset default`: the workload runs as a run does.
    With fewer workers than rollouts the engine never sees more than `workers` requests at once."""
    from whale.core.config import load_config

    cfg = load_config("default", None, [])
    return cfg.runner.workers, cfg.model.max_batch


def _runner(engine: Any, domain: Any, settings: BenchSettings, workers: int, lockstep: bool = False) -> Any:
    from whale.core.config import Config
    from whale.harness.calls import RunnerLimits
    from whale.harness.runner import RolloutRunner
    from whale.model.engine import SamplingParams

    s = Config().sampling
    sampling = SamplingParams(s.temperature, s.top_p, s.top_k, s.max_tokens)
    limits = RunnerLimits(workers=workers, max_tokens_cap=settings.workload_max_tokens, lockstep=lockstep)
    return RolloutRunner(engine, domain, sampling, limits, seed=SEED)


def _prompt_counters(engine: Any) -> tuple[int, int] | None:
    """(computed, reused) prompt tokens so far, for the engines that count them."""
    if hasattr(engine, "prefill_computed"):
        return engine.prefill_computed, engine.prefill_reused
    if hasattr(engine, "prompt_tokens_computed"):
        return engine.prompt_tokens_computed, 0
    return None


def run_engine(
    engine: Any,
    domain: Any,
    tasks: list[Any],
    settings: BenchSettings,
    workers: int,
    lockstep: bool = False,
    before_timing: Callable[[], None] | None = None,
    warm_k: int = 1,
) -> dict[str, Any]:
    """One engine on one domain's workload: warmed by `warm_k` rollouts per task (which start as many
    sandbox workers, up to `workers`), then tasks x k timed, with at most `workers` rollouts at once (in
    lockstep: the engine steps only once every started rollout waits on it, so requests arrive together).
    `before_timing` runs between the two, with the workers up."""
    from whale.harness.calls import RolloutJob
    from whale.harness.records import HarnessCandidate

    harness = HarnessCandidate("seed", domain.seed_harness())
    runner = _runner(engine, domain, settings, workers, lockstep)
    try:
        runner.run([RolloutJob(t, harness, j, salt="warm-up") for t in tasks for j in range(warm_k)])
        if before_timing is not None:
            before_timing()
        before_tokens, before_prompt = engine.tokens_generated, _prompt_counters(engine)
        jobs = [RolloutJob(t, harness, j) for t in tasks for j in range(settings.workload_k)]
        start = time.perf_counter()
        rollouts = runner.run(jobs)
        wall = time.perf_counter() - start
    finally:
        runner.close()
    calls = [c for r in rollouts for c in r.calls]
    tokens = engine.tokens_generated - before_tokens
    prompt = sum(len(c.prompt_ids) for c in calls)
    after_prompt = _prompt_counters(engine)
    return {
        "engine": type(engine).__name__,
        "workers": workers,
        "rollouts": len(rollouts),
        "failed": sum(r.error is not None for r in rollouts),
        "mean_reward": sum(r.reward or 0.0 for r in rollouts) / len(rollouts),
        "model_calls": len(calls),
        "wall_s": wall,
        "generated_tokens": tokens,
        "tokens_per_s": tokens / wall,
        "prompt_tokens": prompt,
        "prompt_tokens_computed": prompt if before_prompt is None else after_prompt[0] - before_prompt[0],
        "first_prompts": [r.calls[0].prompt_ids for r in rollouts[:: settings.workload_k] if r.calls],
    }


def vllm_workload_params(engine: Any, settings: BenchSettings) -> Callable[[int, int], Any]:
    """(seed, n) -> vLLM SamplingParams meaning the workload's sampling (whale's defaults, its max_tokens)."""
    from whale.core.config import Config
    from whale.model.engine import SamplingParams
    from whale.model.vllm_engine import vllm_sampling_kwargs

    s = Config().sampling
    max_tokens = min(s.max_tokens, settings.workload_max_tokens)
    sampling = SamplingParams(s.temperature, s.top_p, s.top_k, max_tokens)

    def params(seed: int, n: int) -> Any:
        return engine.vllm.SamplingParams(**{**vllm_sampling_kwargs(sampling, seed, logprobs=False), "n": n})

    return params


def run_vllm_alone(engine: Any, prompts: list[list[int]], settings: BenchSettings) -> dict[str, Any]:
    """vLLM's own `LLM.generate` on the runner's first prompts, k samples each by `n`, warmed as the
    runner's run is (one sample of each first): what the engine gives without whale's runner, so that the
    runner's share of the gap to a target is measured, not guessed. Prompt tokens computed are not counted:
    vLLM splits a request with n > 1 into n child requests and reports the cache hits of one."""
    params = vllm_workload_params(engine, settings)
    inputs = [{"prompt_token_ids": p} for p in prompts]
    engine.llm.generate(inputs, params(SEED, 1), use_tqdm=False)
    start = time.perf_counter()
    outputs = engine.llm.generate(inputs, params(SEED, settings.workload_k), use_tqdm=False)
    wall = time.perf_counter() - start
    tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    return {
        "kind": "vllm alone (LLM.generate, n=k)",
        "samples": sum(len(o.outputs) for o in outputs),
        "wall_s": wall,
        "generated_tokens": tokens,
        "tokens_per_s": tokens / wall,
    }


def run_generate(
    model: Any, tokenizer: Any, prompts: list[list[int]], settings: BenchSettings
) -> dict[str, Any]:
    """transformers' generate, sampling as a run does, num_return_sequences=k, on left-padded prompts; the
    second of two identical calls is timed."""
    import torch
    from transformers import GenerationConfig

    from whale.core.config import Config

    s = Config().sampling
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    max_new = min(s.max_tokens, settings.workload_max_tokens)
    config = GenerationConfig(
        max_new_tokens=max_new, do_sample=True, temperature=s.temperature, top_k=s.top_k or None,
        top_p=s.top_p, num_return_sequences=settings.workload_k, pad_token_id=pad,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    with torch.no_grad():
        # Untimed first call: a fresh process's first batch of this size ran 1.5x slower here (memory not
        # yet mapped), and the engines it is compared with are warm too.
        model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        torch.manual_seed(SEED)
        start = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        wall = time.perf_counter() - start
    eos = {tokenizer.eos_token_id}
    tokens = sum(len(trim_at_eos(row, eos, max_new)) for row in out[:, width:].tolist())
    return {
        "kind": "transformers.generate",
        "wall_s": wall,
        "generated_tokens": tokens,
        "tokens_per_s": tokens / wall,
        "prompt_tokens_computed": width * len(prompts) * settings.workload_k,
    }


def bench_workload(
    model: Any, tokenizer: Any, settings: BenchSettings, log: Callable[[str], None]
) -> dict[str, Any]:
    """Every engine, then transformers' generate, on each built-in domain; ratios against generate. Each
    engine is built once (its start-up timed) and serves every domain."""
    from whale.core.config import Config, DomainConfig, EngineConfig
    from whale.domains.registry import build_domain
    from whale.model.backends import build_engine, choose_kind, engine_dtype

    kinds = workload_kinds(model)
    workers, max_batch = run_concurrency()
    sizes = {"train": 1, "search": settings.workload_tasks, "val": 1, "test": 1}
    domains = {name: build_domain(DomainConfig(name=name, seed=SEED, sizes=sizes)) for name in DOMAINS}
    tasks = {name: d.splits()["search"][: settings.workload_tasks] for name, d in domains.items()}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in DOMAINS}
    alone: dict[str, dict[str, Any]] = {}  # vLLM without whale's runner, where vLLM is measured
    for kind in kinds:
        start = time.perf_counter()
        engine = build_engine(EngineConfig(kind=kind), model, tokenizer, max_batch=max_batch)
        startup = time.perf_counter() - start
        try:
            for name, domain in domains.items():
                log(f"workload: {name}, {len(tasks[name])} tasks x {settings.workload_k}, engine {kind}")
                run = run_engine(engine, domain, tasks[name], settings, workers)
                runs[name].append({"kind": kind, "dtype": engine_dtype(engine), "startup_s": startup, **run})
                if kind == "vllm":
                    alone[name] = run_vllm_alone(engine, run["first_prompts"], settings)
        finally:
            if hasattr(engine, "close"):
                engine.close()
    result = {}
    for name in DOMAINS:
        log(f"workload: {name}, transformers.generate")
        prompts = runs[name][0]["first_prompts"]
        baseline = run_generate(model, tokenizer, prompts, settings)
        for run in runs[name]:
            run.pop("first_prompts")
            run["vs_generate"] = run["tokens_per_s"] / baseline["tokens_per_s"]
        result[name] = {
            "tasks": len(tasks[name]), "prompts": len(prompts), "runs": runs[name], "generate": baseline,
        }  # fmt: skip
        if name in alone:
            alone[name]["vs_generate"] = alone[name]["tokens_per_s"] / baseline["tokens_per_s"]
            result[name]["vllm_alone"] = alone[name]
    return {
        "k": settings.workload_k,
        "max_tokens": settings.workload_max_tokens,
        "workers": workers,
        "max_batch": max_batch,
        "kinds": kinds,
        "default_kind": choose_kind(Config().engine, model)[0],  # the engine a default config runs here
        "domains": result,
        "ratio_formula": "engine tokens_per_s (runner, every call) / generate tokens_per_s (first calls x k)",
    }
