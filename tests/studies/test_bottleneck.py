"""Where a run's first phase is read from: its events, else the schedule its config builds."""

from __future__ import annotations

import pytest

from whale.core.config import METHODS
from whale.run.schedule import HARNESS, HARNESS_ONLY, WEIGHTS
from whale.studies.bottleneck import start_kind

FIRST = {method: HARNESS for method in (*HARNESS_ONLY, "stagewise-harness-first")}


@pytest.mark.parametrize("method", METHODS)
def test_a_run_without_units_starts_where_its_schedule_starts(method):
    assert start_kind({"schedule": {"method": method}}, []) == FIRST.get(method, WEIGHTS)


def test_the_first_event_and_the_start_setting_win_over_the_default():
    assert start_kind({"schedule": {"method": "whale", "start": "harness"}}, []) == HARNESS
    switch = {"event": "phase_switch", "from": HARNESS, "to": WEIGHTS, "rollouts": 10}
    assert start_kind({"schedule": {"method": "whale"}}, [switch]) == HARNESS
    assert start_kind({"schedule": {"method": "whale", "nonsense": 1}}, []) == WEIGHTS
