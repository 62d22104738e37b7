"""The studies of the results edition: what each runs, and the reasoning-gym families chosen by the stated
rule rather than by hand."""

from __future__ import annotations

import pytest

from tests.studies.test_results import DOCS
from whale.core.config import load_config
from whale.core.files import read_json
from whale.studies.plan import GYM, GYM_FAMILIES, PILOTS, RATE_PILOTS, STUDIES


def test_every_study_loads_its_config_and_runs_five_seeds_unless_a_pilot():
    for s in STUDIES:
        cfg = load_config(s.preset, None, list(s.overrides))
        assert cfg.domain.sizes["search"] == 64, s.name  # 16 search tasks could not see a real harness gain
        assert s.seeds == (3 if s in PILOTS else 5), s.name
    assert STUDIES[: len(PILOTS)] == PILOTS  # the budget is chosen before the runs that spend it
    assert PILOTS[: len(RATE_PILOTS)] == RATE_PILOTS  # the other pilots run at the rate these pick
    assert len({s.name for s in STUDIES}) == len(STUDIES)


def test_the_gym_families_follow_the_rule_stated_before_their_runs():
    """Mean@4 in [0.02, 0.40] and a solved sample; per reasoning-gym task kind the family with the most
    solved samples; the three kinds whose pick solved most (ties: the higher mean)."""
    factory = pytest.importorskip("reasoning_gym.factory")
    scores = read_json(DOCS / "bench" / "2026-12-05-gym-scores.json")
    qualifying = {
        name: s
        for name, s in scores["datasets"].items()
        if scores["low"] <= s["mean"] <= scores["high"] and s["solved"] > 0
    }
    best: dict[str, tuple[float, float, str]] = {}
    for name, s in qualifying.items():
        kind = factory.DATASETS[name][0].__module__.split(".")[1]
        best[kind] = max(best.get(kind, (0.0, 0.0, "")), (s["solved"], s["mean"], name))
    chosen = [name for _, _, name in sorted(best.values(), reverse=True)[:3]]
    assert tuple(sorted(chosen)) == GYM_FAMILIES
    assert [s.overrides for s in GYM] == [(f"domain.options.dataset={f}",) for f in GYM_FAMILIES]
    assert all(load_config(s.preset, None, list(s.overrides)).domain.name == "reasoning-gym" for s in GYM)
