"""`whale.run.preflight`: the warning a run prints when torch's threads would fight other work for cores,
and the dtypes a resumed run keeps."""

from __future__ import annotations

import pytest

from whale.core.config import Config
from whale.run.preflight import as_started, busy_machine_warning


@pytest.mark.parametrize(
    ("threads", "cores", "load", "fit"),
    [(2, 2, 2.0, 1), (2, 2, 0.9, 1), (8, 8, 4.1, 4), (8, 8, 9.5, 1)],
)
def test_a_busy_machine_gets_a_warning_naming_the_threads_that_fit(threads, cores, load, fit):
    warning = busy_machine_warning(threads, cores, load)
    assert warning is not None and f"OMP_NUM_THREADS={fit} " in warning
    assert f"load {load:.1f} on {cores} cores" in warning


@pytest.mark.parametrize(("threads", "cores", "load"), [(2, 2, 0.3), (2, 2, 0.45), (1, 2, 3.0), (4, 8, 3.9)])
def test_a_quiet_machine_or_threads_that_fit_get_none(threads, cores, load):
    assert busy_machine_warning(threads, cores, load) is None


def test_a_resume_keeps_what_was_decided_unless_the_config_names_it():
    cfg = Config.model_validate({"model": {"name": "tiny"}})
    began = {"engine": {"dtype": "bfloat16", "vllm": {"dtype": "bfloat16"}}, "weights": {"dtype": "bfloat16"},
             "runner": {"lockstep": True}}  # fmt: skip
    kept = as_started(cfg, began)
    assert (kept.engine.dtype, kept.engine.vllm.dtype, kept.weights.dtype, kept.runner.lockstep) == (
        "bfloat16", "bfloat16", "bfloat16", True)  # fmt: skip
    named = Config.model_validate({"model": {"name": "tiny"}, "engine": {"dtype": "float32"}, "runner": {
        "lockstep": False}})  # fmt: skip
    kept = as_started(named, began)
    assert (kept.engine.dtype, kept.engine.vllm.dtype, kept.runner.lockstep) == ("float32", "bfloat16", False)
    assert as_started(cfg, None) == cfg
