"""The in-process executor as a run configures it."""

from __future__ import annotations

import torch

from tests.conftest import AddDomain, FakeEngine
from whale.core.config import load_config
from whale.model.backends import engine_dtype
from whale.model.fast_engine import FastEngine
from whale.rollout.executor import build_runner


def test_the_runner_takes_its_limits_from_the_config():
    sets = ["runner.workers=6", "runner.idle_workers=18", "runner.lockstep=true"]
    runners = [build_runner(load_config("tiny", overrides=o), FakeEngine(), AddDomain()) for o in (sets, [])]
    try:
        limits, default = runners[0].limits, runners[1].limits
        assert (limits.workers, limits.idle_workers, limits.lockstep) == (6, 18, True)
        assert default.idle_workers is None  # as many as `workers`
        assert default.lockstep is False  # undecided: on only for an engine that computes in bfloat16
    finally:
        for runner in runners:
            runner.close()


def test_a_runner_left_undecided_steps_a_bfloat16_engine_in_lockstep(tiny):
    """bfloat16 logits move with the batch around a row, so its draws repeat only in fixed batches."""
    engines = {dtype: FastEngine(*tiny, dtype=dtype) for dtype in (torch.float32, torch.bfloat16)}
    runners = {d: build_runner(load_config("tiny"), e, AddDomain()) for d, e in engines.items()}
    try:
        assert runners[torch.bfloat16].limits.lockstep and not runners[torch.float32].limits.lockstep
        assert engine_dtype(engines[torch.bfloat16]) == "bfloat16"
    finally:
        for runner in runners.values():
            runner.close()
