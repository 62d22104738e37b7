"""The executor seam: who runs rollout jobs. `local` is the in-process RolloutRunner; `ray` spreads the
jobs over Ray actors (whale/rollout/ray_actors.py); whale/rollout/build.py picks one. Experiments, harness
search and `whale eval` see only this.

Every model call is seeded from (run seed, task, sample, salt, call index), never from the batch it lands
in, so which executor (or which actor) ran a job does not change its rollout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from whale.core.config import Config
from whale.harness.calls import RolloutJob, RunnerLimits
from whale.harness.records import Rollout
from whale.harness.runner import RolloutRunner
from whale.model.backends import engine_dtype
from whale.model.engine import Engine, SamplingParams


class WeightSource(Protocol):
    """What an executor copies weights from after a weight update (a Trainer)."""

    def trainable_state(self) -> dict[str, Any]: ...


class Executor(Protocol):
    engine_calls: int  # generate() calls so far, kept in state.json across a resume
    sandbox_problems: list[str]  # OS sandbox layers some worker could not apply

    @property
    def weights_version(self) -> str: ...

    def run(self, jobs: list[RolloutJob], on_done: Callable[[Rollout], None] | None = None) -> list[Rollout]:
        """One Rollout per job, in job order; `on_done` sees each rollout once, as it is accepted."""
        ...

    def sync_weights(self, version: str, source: WeightSource) -> None:
        """Serve `source`'s current weights, labelled `version`, from the next job on."""
        ...

    def close(self) -> None: ...


def lockstep_for(setting: bool | None, dtype: str | None) -> bool:
    """`runner.lockstep`, where None means on in bfloat16: its draws repeat only in fixed batches."""
    return dtype == "bfloat16" if setting is None else setting


def build_runner(cfg: Config, engine: Engine, domain: Any) -> RolloutRunner:
    """The in-process runner: sandbox workers of this process, model calls batched into `engine`, which
    it owns: closing the runner closes the engine (vLLM's processes end with it)."""
    s, r = cfg.sampling, cfg.runner
    limits = RunnerLimits(
        workers=r.workers, idle_workers=r.idle_workers, step_timeout_s=r.step_timeout_s,
        rollout_timeout_s=r.rollout_timeout_s, tool_timeout_s=r.tool_timeout_s, memory_mb=r.memory_mb,
        lockstep=lockstep_for(r.lockstep, engine_dtype(engine)),
    )  # fmt: skip
    sampling = SamplingParams(s.temperature, s.top_p, s.top_k, s.max_tokens)
    runner = RolloutRunner(engine, domain, sampling, limits, cfg.seed)
    runner.owns_engine = True
    return runner
