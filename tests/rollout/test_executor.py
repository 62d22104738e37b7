"""The in-process executor as a run configures it."""

from __future__ import annotations

from tests.conftest import AddDomain, FakeEngine
from whale.core.config import load_config
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
