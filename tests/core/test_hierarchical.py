"""Seed-then-task intervals, exact sign tests and Holm's correction, against cases worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from whale.core.hierarchical import (
    holm,
    seed_interval,
    seed_task_difference,
    seed_task_draws,
    seed_task_mean,
    sign_test,
    student_quantile,
    student_two_sided,
)


def test_the_two_level_bootstrap_matches_a_case_worked_by_hand():
    # two seeds whose tasks agree within the seed (0 and 1): a draw of two seeds averages to 0, 1/2 or 1
    # with probabilities 1/4, 1/2, 1/4, whatever the tasks drawn inside each seed
    draws = seed_task_draws([[0.0, 0.0], [1.0, 1.0]], n_boot=20000, seed=1)
    shares = [np.mean(draws == v) for v in (0.0, 0.5, 1.0)]
    assert shares == pytest.approx([0.25, 0.5, 0.25], abs=0.015)
    # one seed, tasks 0 and 1: the same distribution, now from the task level
    one = seed_task_draws([[0.0, 1.0]], n_boot=20000, seed=1)
    assert [np.mean(one == v) for v in (0.0, 0.5, 1.0)] == pytest.approx([0.25, 0.5, 0.25], abs=0.015)
    m = seed_task_mean([[0.0, 0.0], [1.0, 1.0]])  # t over 2 seeds, 0.5 +- 12.71 x 0.5, cut to the scores
    assert (m.mean, m.ci_low, m.ci_high) == (0.5, 0.0, 1.0)


def test_student_t_matches_its_tables():
    assert student_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-3)
    assert student_quantile(0.975, 2) == pytest.approx(4.303, abs=1e-3)
    assert student_quantile(0.975, 10) == pytest.approx(2.228, abs=1e-3)
    assert student_two_sided(2.0, 5) == pytest.approx(0.1019, abs=1e-4)


def test_the_seed_and_task_interval_widens_with_seed_disagreement():
    tasks = [f"t{i}" for i in range(20)]
    agree = [{t: 0.1 for t in tasks} | {"t0": 0.2} for _ in range(3)]
    split = [{t: v for t in tasks} for v in (0.3, 0.1, -0.1)]  # same mean, seeds disagree
    narrow, wide = seed_task_difference(agree), seed_task_difference(split)
    assert narrow.ci_low > 0 and narrow.mean_diff == pytest.approx(0.105) and narrow.p < 0.01
    assert wide.mean_diff == pytest.approx(0.1) and wide.ci_low < 0 < wide.ci_high and wide.p > 0.05
    assert wide.n_tasks == 60 and wide.per_seed == pytest.approx([0.3, 0.1, -0.1])
    assert wide.test == "seed-then-task bootstrap and t over 3 seeds"
    # the t interval over the seed means 0.3, 0.1, -0.1: 0.1 +- 4.303 x 0.2 / sqrt(3)
    assert (wide.ci_low, wide.ci_high) == pytest.approx((0.1 - 0.4969, 0.1 + 0.4969), abs=1e-3)


def test_few_differing_tasks_are_judged_by_the_exact_sign_test():
    assert sign_test(2, 0) == 0.5  # the chess case: 2 discordant tasks, both one way
    assert sign_test(6, 0) == pytest.approx(2 / 64)
    assert sign_test(3, 3) == 1.0 and sign_test(0, 0) == 1.0
    per_seed = [{f"t{i}": (1.0 if i < 2 else 0.0) for i in range(32)} for _ in range(3)]
    d = seed_task_difference(per_seed)
    assert d.test.startswith("exact sign test, 2+ 0- tasks") and d.p == 0.5


def test_holm_adjusts_in_step_down_order():
    # sorted 0.01, 0.02, 0.04 with 3 tests: 0.03, 0.04, 0.04 (monotone), returned in the input's order
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_a_method_with_no_gain_is_called_different_at_most_at_the_nominal_rate():
    """Null data, 3 seeds x 24 tasks: seed offsets half as large as the task noise, no true difference.
    A seed-then-task bootstrap alone rejects about 17% of these; with the t test over seeds, about 5%."""
    rng = np.random.default_rng(7)
    rejected = 0
    for _ in range(200):
        offsets = rng.normal(0, 0.1, size=3)
        per_seed = [{f"t{t}": o + rng.normal(0, 0.2) for t in range(24)} for o in offsets]
        rejected += seed_task_difference(per_seed, n_boot=1000).p < 0.05
    assert rejected / 200 <= 0.08  # nominal 5%, with room for 200 simulations' own noise


def test_a_cost_per_seed_gets_an_interval_over_seeds():
    one = seed_interval([300.0])
    assert (one.mean, one.ci_low, one.ci_high) == (300.0, 300.0, 300.0)
    spread = seed_interval([200.0, 400.0, 600.0])
    assert spread.mean == 400.0 and spread.ci_low < 400.0 < spread.ci_high
