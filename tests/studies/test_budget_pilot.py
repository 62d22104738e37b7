"""The budget pilot's rule: the first budget after which weight-only's validation curve stops rising."""

from __future__ import annotations

from tests.studies.test_results import fake_run
from whale.studies.budget_pilot import FLAT, flattened_at, section_pilot
from whale.studies.compare import mean_curve
from whale.studies.plan import PILOTS, StudySummary


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
    assert "**768 budget rollouts**" in text and "| 768 | 0.200 | flat from here |" in text
