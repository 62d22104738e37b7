"""The compute plan: runs counted once across the studies that share them, done runs with their recorded
hours, estimates from recorded runs scaled to the study's budget and evaluation points, and the basis
named."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from tests.studies.test_results import DOCS, fake_run
from whale.core.files import atomic_write_json
from whale.core.provenance import code_version
from whale.studies.compute import (
    RunCost,
    evaluation_points,
    plan_rows,
    recorded_costs,
    run_estimate,
    schedule_of,
    section_plan,
)
from whale.studies.plan import EDITION, STUDIES, Study, summary_path

TINY = dict(preset="tiny", overrides=("domain.name=math",))


def summary(docs, study: Study, runs, budget: int, edition=EDITION, complete=True) -> None:
    record = {"study": study.name, "methods": list(study.methods), "k": 8, "seeds": study.seeds}
    record |= {"domain": "math", "budget_rollouts": budget, "runs": [asdict(r) for r in runs]}
    if edition is not None:
        record |= {"edition": edition, "complete": complete}
    atomic_write_json(summary_path(docs, study), record)


def timed(method: str, seed: int, wall_s: float):
    run = fake_run(method, [(0, 0.1)])
    run.seed, run.commits = seed, [code_version()]
    run.budget["wall_s"] = wall_s
    return run


def test_controls_and_algorithms_cost_like_their_schedule():
    assert schedule_of("whale+dpo+distill") == "whale"
    assert schedule_of("harness-random") == schedule_of("harness-resample") == "harness-only"


def per_rollout(*rates: float) -> list[RunCost]:
    return [RunCost(rate * 100, 100, 3) for rate in rates]


def test_an_estimate_falls_back_from_schedule_to_domain_to_all_runs():
    costs = {
        ("math", "whale"): per_rollout(1.0, 3.0),
        ("math", "weight-only"): per_rollout(0.5),
        ("chess", "whale"): per_rollout(4.0),
    }
    assert run_estimate(costs, "math", "whale+dpo", 100, 3) == (200.0, "math whale (2)")
    any_schedule = (pytest.approx(150.0), "math, any schedule (3)")
    assert run_estimate(costs, "math", "fast-slow", 100, 3) == any_schedule
    assert run_estimate(costs, "reasoning-gym", "whale", 10, 3) == (pytest.approx(21.25), "all runs (4)")
    assert run_estimate({}, "math", "whale", 10, 3) == (0.0, "no runs recorded")


def test_evaluations_scale_with_the_points_and_the_rest_with_the_budget():
    assert [evaluation_points(b, 384) for b in (2304, 768, 100, 385)] == [7, 3, 2, 3]
    pilot = RunCost(wall_s=1000.0, budget=2304, points=7, eval_s=700.0)  # 300 s of training
    assert pilot.scaled(768, 7) == pytest.approx(700.0 + 100.0)  # a third of the budget, as many points
    assert pilot.scaled(2304, 14) == pytest.approx(1400.0 + 300.0)
    assert RunCost(1000.0, 2304, 7).scaled(768, 7) == pytest.approx(1000.0 / 3)  # no parts: all by budget
    costs = {("math", "whale"): [pilot, RunCost(50.0, 100, 3)]}  # one without parts: left out beside one with
    assert run_estimate(costs, "math", "whale", 768, 7) == (pytest.approx(800.0), "math whale (1)")


def test_this_editions_runs_stand_in_before_older_ones_at_the_same_level():
    old = RunCost(100.0, 100, 3, eval_s=50.0)  # an earlier edition's, parts recorded
    ours = RunCost(300.0, 100, 3, edition=EDITION)  # this edition's defaults cost more
    whale = [RunCost(900.0, 100, 3, edition=EDITION)]
    costs = {("math", "harness-only"): [old, ours], ("math", "whale"): whale}
    basis = "math harness-only (1 of this edition)"
    assert run_estimate(costs, "math", "harness-random", 100, 3) == (300.0, basis)
    costs = {("math", "harness-only"): [old], ("math", "whale"): whale}  # not this edition's other schedule
    assert run_estimate(costs, "math", "harness-resample", 100, 3) == (100.0, "math harness-only (1)")


def test_plan_counts_shared_runs_once_and_splits_done_from_estimated(tmp_path):
    first = Study("tiny-a", "a", methods=("whale", "weight-only"), seeds=2, **TINY)
    sharer = Study("tiny-b", "b", methods=("whale", "whale+dpo"), seeds=2, folder="tiny-a", **TINY)
    old = Study("tiny-old", "o", methods=("whale",), seeds=1, **TINY)
    summary(tmp_path, old, [timed("whale", 0, 600.0)], budget=100, edition=None)  # first edition: a rate only
    budget = 60  # the tiny preset's
    summary(tmp_path, first, [timed("whale", 0, 300.0)], budget=budget, complete=False)
    per_budget_rollout = [c.wall_s / c.budget for c in recorded_costs(tmp_path)[("math", "whale")]]
    assert per_budget_rollout == [5.0, 6.0]  # by file name; fake runs recorded no parts
    a, b = plan_rows(tmp_path, (first, sharer))
    assert (a.runs, a.done, a.measured_s) == (4, 1, 300.0)
    # weight-only has no rate: math's (any schedule) stands in, this edition's run before the older one
    assert a.estimate_s == pytest.approx(5.0 * budget * 3)
    assert (b.runs, b.done) == (2, 0)  # its whale runs are the first study's; only whale+dpo is its own
    assert b.estimate_s == pytest.approx(5.0 * budget * 2) and b.basis == "math whale (1 of this edition)"
    text = "\n".join(section_plan(tmp_path, (first, sharer)))
    assert "| 1 | tiny-a | 60 | 4 | 1 | 0.1 |" in text and "|  | all |  | 6 | 1 | 0.1 |" in text


def test_the_committed_plan_runs_pilots_first_and_every_study_has_an_estimate():
    rows = plan_rows(DOCS)
    assert [r.study for r in rows][:5] == [
        "math-budget-1e-4", "math-budget-3e-4", "math-budget-1e-3", "searchqa-budget", "chess-budget"
    ]  # fmt: skip
    math = next(r for r in rows if r.study == "math")
    assert math.budget in ("768 until its pilots", "768", "1152", "1536", "1920", "2304")
    assert all(r.estimate_s > 0 for r in rows if r.done < r.runs)
    assert sum(r.runs for r in rows) < sum(s.seeds * len(s.methods) for s in STUDIES)  # shared runs once


def test_results_plan_prints_the_table_and_runs_nothing(tmp_path):
    from tests.cli.test_cli import whale

    proc = whale(
        "results", "--plan", "--study", "math", "--study", "math-algorithms", "--docs", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stderr
    assert "| 1 | math | 768 until its pilots | 30 | 0 | 0.0 |" in proc.stdout
    assert "| 2 | math-algorithms | 768 until its pilots | 10 | 0 |" in proc.stdout
    assert "no runs recorded" in proc.stdout  # an empty docs folder: nothing to estimate from
    assert not (tmp_path / "results.md").exists() and not (tmp_path / "runs").exists()
