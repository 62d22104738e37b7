"""`whale.core.timing`: parts count in the innermost unit, a unit's wall leaves out its nested units, and
time is kept through exceptions."""

from __future__ import annotations

import time

import pytest

from whale.core import timing


def spent(before: dict, after: dict, label: str, part: str) -> float:
    return after.get(label, {}).get(part, 0.0) - before.get(label, {}).get(part, 0.0)


def test_parts_land_in_the_innermost_unit_and_walls_do_not_double_count() -> None:
    before = timing.snapshot()
    with timing.unit("test step"):
        with timing.timed("engine"):
            time.sleep(0.03)
        with timing.unit("test eval"), timing.timed("engine"):
            time.sleep(0.05)
    with pytest.raises(RuntimeError), timing.unit("test eval"), timing.timed("engine"):
        time.sleep(0.02)
        raise RuntimeError("still counted")
    after = timing.snapshot()
    assert spent(before, after, "test step", "engine") >= 0.03
    assert spent(before, after, "test eval", "engine") >= 0.07
    step_wall = spent(before, after, "test step", "wall")
    assert 0.03 <= step_wall < 0.075  # its nested evaluation (0.05 s) is not in it
    assert spent(before, after, "test eval", "wall") >= 0.07


def test_counts_land_in_the_innermost_unit_beside_its_seconds() -> None:
    before = timing.snapshot()
    with timing.unit("test eval"):
        timing.counted("workers started", 3)
        with timing.unit("test step"):
            timing.counted("workers started")
    after = timing.snapshot()
    assert spent(before, after, "test eval", "workers started") == 3
    assert spent(before, after, "test step", "workers started") == 1
