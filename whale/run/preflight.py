"""Checks made before a run touches the disk or loads a model: an engine or proposer that cannot serve
this config, a seed harness that breaks the contract, and the dtype the engines compute in."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale.core.config import Config, ConfigError, EngineConfig
from whale.domains.base import Domain
from whale.domains.registry import minimal_seed
from whale.harness import validate
from whale.harness.records import HarnessCandidate
from whale.model.loading import check_model_name
from whale.run.schedule import method_rules
from whale.run.tracking import check_tracking
from whale.search.proposer import ProposerUsage

if TYPE_CHECKING:
    from whale.model.trainer import Trainer


def seed_candidate(cfg: Config, domain: Domain) -> HarnessCandidate:
    """c0000: `domain.harness` if set, the domain's minimal harness with `domain.minimal_seed`, else its
    own seed, checked against the contract."""
    path = cfg.domain.harness
    if path and cfg.domain.minimal_seed:
        raise ConfigError("domain.harness and domain.minimal_seed: set one, not both")
    if cfg.domain.minimal_seed:
        source = minimal_seed(cfg.domain.name)
    elif path:
        if not Path(path).is_file():
            raise ConfigError(f"domain.harness: file not found: {path}")
        source = Path(path).read_text()
    else:
        source = domain.seed_harness()
    problems = validate.problems(source)
    if problems:
        raise ConfigError(f"seed harness {path or domain.name}: {problems[0]}")
    return HarnessCandidate("c0000", source, None, "seed harness", "seed")


def check_config(cfg: Config) -> None:
    """Everything that can be checked before anything is loaded: the model's name, the engine, the
    proposer and experiment tracking, each a one-line ConfigError."""
    check_model_name(cfg.model.name)
    check_engine(cfg)
    check_proposer(cfg)
    check_tracking(cfg.tracking)


def check_proposer(cfg: Config) -> None:
    """A misconfigured LLM or agent proposer is a start-up error, not a silently empty search later."""
    p = cfg.proposer
    try:
        if p.kind == "llm":
            from whale.search.llm_proposer import LLMProposer

            LLMProposer(p, ProposerUsage())
        elif p.kind == "agent":
            from whale.search.agent_proposer import AgentProposer

            problem = AgentProposer(p, ProposerUsage()).check()
            if problem:
                raise ValueError(problem)
    except ValueError as exc:
        raise ConfigError(f"proposer: {exc}") from None


def check_engine(cfg: Config) -> None:
    """An engine that cannot serve this run is a one-line start-up error, before any model is loaded:
    vLLM not installed; a remote server misconfigured, or asked to feed weight phases without ids."""
    e = cfg.engine
    try:
        if e.kind == "vllm":
            from whale.model.vllm_engine import import_vllm

            if cfg.model.name == "tiny":
                raise ValueError("engine.kind=vllm loads the model from a folder; model.name=tiny has none")
            import_vllm()
        elif e.kind == "remote":
            from whale.model.remote_engine import RemoteEngine, weight_phase_problem

            engine = RemoteEngine(e.remote)  # checks the URL and the API key variable
            trains = method_rules(cfg.schedule.method).trains
            problem = weight_phase_problem(engine, cfg.weights.lora) if trains else ""
            engine.close()
            if problem:
                raise ValueError(problem)
    except (ImportError, ValueError) as exc:
        raise ConfigError(str(exc)) from None


def resolve_engine(cfg: Config, trainer: Trainer, tokenizer: Any) -> tuple[Config, str]:
    """The config the engines are built from and the run records (`engine.kind=auto`, the engines'
    "auto" dtypes, the trainer's and lockstep replaced by what was chosen) and what to log about it:
    backend, dtype, threads and why. Decided once, in the driver, so every engine of a run agrees."""
    import torch

    model = trainer.model

    from whale.model.backends import choose_kind

    kind, chosen_by = choose_kind(cfg.engine, model)
    engine = cfg.engine.model_copy(update={"kind": kind})
    if kind == "vllm":
        from whale.model.vllm_engine import on_cpu, summary, with_cpu_dtype

        vllm = with_cpu_dtype(engine.vllm, model)
        engine = engine.model_copy(update={"vllm": vllm})
        dtype, line = vllm.dtype, f"vllm {summary(vllm, on_cpu())}; {chosen_by}"
    elif kind == "fast":
        from whale.model.dtype_probe import pick_dtype

        picked, why = pick_dtype(model, tokenizer, engine.dtype)
        dtype = str(picked).removeprefix("torch.")
        line = f"fast {dtype} ({why}, {torch.get_num_threads()} torch threads); {chosen_by}"
    else:
        dtype, line = None, f"{kind}, the model's dtype; {chosen_by}"
    if dtype in ("float32", "bfloat16"):  # the other engine too, so a resume on it keeps the dtype
        engine = engine_dtypes(engine, dtype, dtype)
    from whale.rollout.executor import lockstep_for

    lockstep = lockstep_for(cfg.runner.lockstep, dtype)
    if lockstep and cfg.runner.lockstep is None:
        line += "; lockstep (bfloat16 draws repeat only in fixed batches)"
    if kind == "vllm" and engine.vllm.engine_core == "auto":
        core = "inline" if lockstep else "process"
        engine = engine.model_copy(update={"vllm": engine.vllm.model_copy(update={"engine_core": core})})
        line += "; vLLM's engine core in whale's process, stepped by the runner" if lockstep else ""
    return cfg.model_copy(update={
        "engine": engine,
        "weights": cfg.weights.model_copy(update={"dtype": trainer.config.dtype}),
        "runner": cfg.runner.model_copy(update={"lockstep": lockstep}),
    }), line  # fmt: skip


def engine_dtypes(engine: EngineConfig, fast: str, vllm: str) -> EngineConfig:
    """`engine` with the fast engine's and vLLM's dtypes set."""
    return engine.model_copy(update={"dtype": fast, "vllm": engine.vllm.model_copy(update={"dtype": vllm})})


def as_started(cfg: Config, started: dict[str, Any] | None) -> Config:
    """A resumed run keeps the dtypes and lockstep it began with, where its config says "auto": a probe
    can measure otherwise today (a busy machine, another CPU), and a run must not change numerics midway."""
    if not started:
        return cfg
    e, w, r = (started.get(key, {}) for key in ("engine", "weights", "runner"))
    engine, weights, runner = cfg.engine, cfg.weights, cfg.runner
    fast, vllm = e.get("dtype", "auto"), e.get("vllm", {}).get("dtype", "auto")
    engine = engine_dtypes(engine, fast if engine.dtype == "auto" else engine.dtype,
                           vllm if engine.vllm.dtype == "auto" else engine.vllm.dtype)  # fmt: skip
    if weights.dtype == "auto" and w.get("dtype", "auto") != "auto":
        weights = weights.model_copy(update={"dtype": w["dtype"]})
    if runner.lockstep is None and r.get("lockstep") is not None:
        runner = runner.model_copy(update={"lockstep": r["lockstep"]})
    return cfg.model_copy(update={"engine": engine, "weights": weights, "runner": runner})


def busy_machine_warning(threads: int, cores: int, load: float) -> str | None:
    """torch's threads wait for each other at every parallel operation, so on cores that other work keeps
    busy they cost far more than they bring (docs/performance.md: 2.4x the CPU seconds beside two runs on
    2 cores). A warning with the fix when `load`, the 1-minute load average, leaves fewer idle cores."""
    idle = cores - load
    if threads <= 1 or threads <= idle + 0.5:
        return None
    fit = max(1, round(idle))
    return (
        f"warning: the machine is busy (load {load:.1f} on {cores} cores) and torch uses {threads} threads, "
        f"which then wait on each other; OMP_NUM_THREADS={fit} matches the idle cores (docs/performance.md)"
    )


def busy_machine_here() -> str | None:
    """`busy_machine_warning` for this process's torch threads, usable cores and load average."""
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # macOS
    return busy_machine_warning(torch.get_num_threads(), cores, os.getloadavg()[0])
