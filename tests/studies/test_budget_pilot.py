"""The budget pilot's rule (the first budget after which weight-only's validation curve stops rising), and
the budget it gives the studies of its preset when they run."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from tests.studies.test_results import fake_run
from whale.core.config import ConfigError
from whale.core.files import atomic_write_json
from whale.studies.budget_pilot import (
    FLAT,
    flattened_at,
    flattening_line,
    picked_rate,
    section_pilot,
    section_rate_pick,
    study_config,
    waiting_for,
)
from whale.studies.compare import mean_curve
from whale.studies.plan import EDITION, PILOTS, RATE_PILOTS, STUDIES, StudySummary, summary_path


def test_flattened_at_is_the_first_point_no_later_point_beats_by_more_than_the_tolerance():
    assert flattened_at([(0, 0.05), (384, 0.15), (768, 0.20), (1152, 0.21), (1536, 0.19)]) == 768
    assert flattened_at([(0, 0.05), (384, 0.15), (768, 0.12), (1152, 0.15 + FLAT + 0.01)]) == 1152
    assert flattened_at([(0, 0.1), (384, 0.1)]) == 0  # never rose: the start is already flat


def test_the_pilot_section_reads_validation_averaged_over_seeds():
    a = fake_run("weight-only", [(0, 0.0), (384, 0.2), (768, 0.3), (1152, 0.3)])
    b = fake_run("weight-only", [(0, 0.0), (384, 0.0), (768, 0.1), (1152, 0.12)])
    b.seed = 1
    assert mean_curve([a, b], "val") == [(0, 0.0), (384, 0.1), (768, 0.2), (1152, 0.21)]
    summary = StudySummary(PILOTS[0], {"k": 8}, {"weight-only": [a, b]})
    text = "\n".join(section_pilot(summary))
    assert (
        "**768 budget rollouts**" in text
        and "| 768 | 0.200 | 0.300 | 0.100 | 0.200 | flat from here |" in text
    )


def test_a_pilot_still_rising_at_its_last_point_is_not_called_flat():
    a = fake_run("weight-only", [(0, 0.0), (384, 0.1), (768, 0.2), (1152, 0.3)])
    text = "\n".join(section_pilot(StudySummary(PILOTS[0], {"k": 8}, {"weight-only": [a]})))
    assert "had not flattened within the pilot's **1152 budget rollouts**" in text
    assert "flat from here" not in text and "It has flattened" not in text


def finished_pilot_summary(docs: Path, pilot, curve: list[tuple[int, float]], edition: int = EDITION) -> None:
    runs = []
    for seed in range(pilot.seeds):
        run = fake_run("weight-only", curve)
        run.seed = seed
        runs.append(asdict(run))
    record = {"study": pilot.name, "methods": ["weight-only"], "k": 8, "seeds": pilot.seeds, "runs": runs}
    atomic_write_json(summary_path(docs, pilot), record | {"edition": edition, "complete": True})


RISING = [(0, 0.0), (384, 0.05), (768, 0.08), (1152, 0.1), (1536, 0.12), (1920, 0.14), (2304, 0.15)]
SETTLING = [(0, 0.0), (384, 0.1), (768, 0.15), (1152, 0.22), (1536, 0.25), (1920, 0.25), (2304, 0.26)]
COLLAPSING = [(0, 0.0), (384, 0.2), (768, 0.05), (1152, 0.0), (1536, 0.0), (1920, 0.0), (2304, 0.0)]


def finish_rate_pilots(docs: Path, curves=(RISING, SETTLING, COLLAPSING)) -> None:
    for pilot, curve in zip(RATE_PILOTS, curves, strict=True):
        finished_pilot_summary(docs, pilot, curve)


def named(name: str):
    return next(s for s in STUDIES if s.name == name)


def test_the_rate_is_picked_with_each_rate_read_up_to_where_its_own_curve_flattened(tmp_path):
    assert picked_rate(tmp_path) is None
    finish_rate_pilots(tmp_path)
    # 1e-3 peaks at 0.20 and collapses (flat from 384: read up to 768); 3e-4 settles at 0.25 by 1536;
    # 1e-4 still rises at 2304 and reaches 0.15
    assert picked_rate(tmp_path) == ("3e-4", 1536)
    text = "\n".join(section_rate_pick(tmp_path))
    assert (
        "Picked: **3e-4**" in text
        and "| 1e-3 | 768 | 0.200 |  |" in text
        and "| 3e-4 | 1536 | 0.250 | the pick |" in text
    )
    finish_rate_pilots(tmp_path, (RISING, COLLAPSING, SETTLING))  # same curves, other rates
    assert picked_rate(tmp_path) == ("1e-3", 1536)


def test_a_study_waits_for_its_pilots_and_then_runs_at_the_rate_and_budget_they_found(tmp_path):
    math, searchqa, gym = named("math"), named("searchqa"), named("gym-knights_knaves")
    with pytest.raises(ConfigError, match="math-budget-1e-4, math-budget-3e-4, math-budget-1e-3, which this"):
        study_config(math, tmp_path)
    assert study_config(math, tmp_path, pending_ok=True).schedule.budget_rollouts == 768  # plans only
    assert waiting_for(named("math-budget-1e-4"), tmp_path) == []  # the rate pilots wait for nothing
    finish_rate_pilots(tmp_path)
    cfg = study_config(math, tmp_path)
    assert (cfg.weights.lr, cfg.schedule.budget_rollouts, cfg.eval.every_rollouts) == (3e-4, 1536, 384)
    pilot = study_config(named("searchqa-budget"), tmp_path)  # the other pilots run at the picked rate
    assert (pilot.weights.lr, pilot.schedule.budget_rollouts) == (3e-4, 2304)
    assert waiting_for(searchqa, tmp_path) == ["searchqa-budget"]
    finished_pilot_summary(
        tmp_path, named("searchqa-budget"), [(0, 0.2), (384, 0.21), (768, 0.2), (2304, 0.2)]
    )
    cfg = study_config(searchqa, tmp_path)
    assert (cfg.weights.lr, cfg.schedule.budget_rollouts) == (3e-4, 768)  # never below the preset's budget
    cfg = study_config(gym, tmp_path)  # no pilot of its own: the preset's budget, the picked rate
    assert (cfg.weights.lr, cfg.schedule.budget_rollouts) == (3e-4, 768) and waiting_for(gym, tmp_path) == []


def test_a_first_edition_pilot_sets_nothing(tmp_path):
    for pilot in RATE_PILOTS:
        finished_pilot_summary(tmp_path, pilot, SETTLING, edition=1)
    assert picked_rate(tmp_path) is None and waiting_for(named("math"), tmp_path)


def test_every_study_with_weight_only_says_whether_its_curve_flattened():
    still = fake_run("weight-only", [(0, 0.0), (384, 0.1), (768, 0.2)])
    flat = fake_run("weight-only", [(0, 0.0), (384, 0.2), (768, 0.21)])
    text = "\n".join(flattening_line(StudySummary(PILOTS[0], {"k": 8}, {"weight-only": [still]})))
    assert "up to its last point (768 budget rollouts): it may still be rising" in text
    text = "\n".join(flattening_line(StudySummary(PILOTS[0], {"k": 8}, {"weight-only": [flat]})))
    assert "flat from 384 of the 768 budget rollouts on" in text
    assert flattening_line(StudySummary(PILOTS[0], {"k": 8}, {"whale": [flat]})) == []
