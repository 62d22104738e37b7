"""The configured executor: the in-process runner, or Ray actors (imported only when asked for)."""

from __future__ import annotations

from typing import Any

from whale.core.config import Config, ConfigError
from whale.rollout.executor import Executor, WeightSource, build_runner


def build_executor(
    cfg: Config, model: Any, tokenizer: Any, domain: Any, weights: WeightSource | None
) -> Executor:
    """The configured executor serving `model` as version w0. `weights` is the trainer whose updates it
    will serve (None: the model as loaded by name, never updated, e.g. `whale eval`)."""
    if cfg.executor.kind == "local":
        from whale.model.backends import build_engine

        return build_runner(cfg, build_engine(cfg.engine, model, tokenizer, cfg.model.max_batch), domain)
    try:
        from whale.rollout.ray_actors import RayExecutor
    except ImportError as exc:
        if exc.name != "ray":
            raise
        raise ConfigError("executor.kind=ray needs Ray: pip install 'whale[ray]'") from None
    return RayExecutor(cfg, weights)
