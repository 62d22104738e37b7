"""`whale.run.preflight`: the warning a run prints when torch's threads would fight other work for cores."""

from __future__ import annotations

import pytest

from whale.run.preflight import busy_machine_warning


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
