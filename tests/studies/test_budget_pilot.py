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
    pilot_of,
    pilot_pending,
    section_pilot,
    study_config,
)
from whale.studies.compare import mean_curve
from whale.studies.plan import EDITION, PILOTS, STUDIES, StudySummary, summary_path


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


def finished_pilot_summary(docs: Path, pilot, curve: list[tuple[int, float]], edition: int = EDITION) -> None:
    runs = []
    for seed in range(pilot.seeds):
        run = fake_run("weight-only", curve)
        run.seed = seed
        runs.append(asdict(run))
    record = {"study": pilot.name, "methods": ["weight-only"], "k": 8, "seeds": pilot.seeds, "runs": runs}
    atomic_write_json(summary_path(docs, pilot), record | {"edition": edition, "complete": True})


def test_a_study_waits_for_its_pilot_and_then_runs_at_the_budget_it_found(tmp_path):
    math = next(s for s in STUDIES if s.name == "math")
    assert pilot_of(math) == next(p for p in PILOTS if p.name == "math-budget")
    with pytest.raises(ConfigError, match="math-budget pilot, which this edition has not finished"):
        study_config(math, tmp_path)
    assert study_config(math, tmp_path, pending_ok=True).schedule.budget_rollouts == 768  # plans only
    finished_pilot_summary(
        tmp_path, pilot_of(math), curve=[(0, 0.0), (384, 0.1), (1152, 0.3), (2304, 0.31)], edition=1
    )
    assert pilot_pending(math, tmp_path)  # a first-edition pilot sets nothing
    finished_pilot_summary(tmp_path, pilot_of(math), curve=[(0, 0.0), (384, 0.1), (1152, 0.3), (2304, 0.31)])
    cfg = study_config(math, tmp_path)
    assert (cfg.schedule.budget_rollouts, cfg.eval.every_rollouts) == (1152, 288)
    lr = next(s for s in STUDIES if s.name == "math-lr-1e-4")  # its own overrides are kept beside it
    assert study_config(lr, tmp_path).weights.lr == 1e-4
    assert study_config(lr, tmp_path).schedule.budget_rollouts == 1152


def test_a_pilot_never_lowers_the_preset_budget_and_sets_nothing_for_itself_or_gym(tmp_path):
    math = next(s for s in STUDIES if s.name == "math")
    finished_pilot_summary(tmp_path, pilot_of(math), curve=[(0, 0.2), (384, 0.21), (768, 0.2)])
    assert study_config(math, tmp_path).schedule.budget_rollouts == 768
    pilot = pilot_of(math)
    assert pilot_of(pilot) is None and study_config(pilot, tmp_path).schedule.budget_rollouts == 2304
    gym = next(s for s in STUDIES if s.preset == "results-gym")
    assert pilot_of(gym) is None and not pilot_pending(gym, tmp_path)


def test_every_study_with_weight_only_says_whether_its_curve_flattened():
    still = fake_run("weight-only", [(0, 0.0), (384, 0.1), (768, 0.2)])
    flat = fake_run("weight-only", [(0, 0.0), (384, 0.2), (768, 0.21)])
    text = "\n".join(flattening_line(StudySummary(PILOTS[0], {"k": 8}, {"weight-only": [still]})))
    assert "up to its last point (768 budget rollouts): it may still be rising" in text
    text = "\n".join(flattening_line(StudySummary(PILOTS[0], {"k": 8}, {"weight-only": [flat]})))
    assert "flat from 384 of the 768 budget rollouts on" in text
    assert flattening_line(StudySummary(PILOTS[0], {"k": 8}, {"whale": [flat]})) == []
