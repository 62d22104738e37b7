import itertools
import math

import numpy as np
import pytest

from whale.core.stats import (
    bootstrap_ci,
    decide_acceptance,
    maj_at_k,
    mean_at_k,
    paired_difference,
    paired_lcb,
    pass_at_k,
    score_split,
)


def test_mean_at_k_weighs_tasks_equally():
    assert mean_at_k([[1, 1, 1, 1], [0, 0]]) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        mean_at_k([])


def test_pass_at_k_known_values():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(10, 6, 5) == 1.0  # fewer than k failures: every k-subset has a success
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))
    big = pass_at_k(2000, 7, 100)
    assert big == pytest.approx(1 - math.comb(1993, 100) / math.comb(2000, 100), rel=1e-9)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_maj_at_k():
    assert maj_at_k(["a", "b", "a"], [False, True, False]) == 0.0
    assert maj_at_k(["b", "a", "a", "b"], [True, False, False, True]) == 1.0  # tie -> first seen
    assert maj_at_k([None, None, "x"], [False, False, True]) == 1.0
    assert maj_at_k([None, None], [False, False]) == 0.0


def test_bootstrap_ci_contains_mean_and_shrinks():
    rng = np.random.default_rng(1)
    small = rng.integers(0, 2, size=20).astype(float).tolist()
    large = rng.integers(0, 2, size=500).astype(float).tolist()
    for data in (small, large):
        lo, hi = bootstrap_ci(data)
        assert lo <= np.mean(data) <= hi
    assert bootstrap_ci(large)[1] - bootstrap_ci(large)[0] < bootstrap_ci(small)[1] - bootstrap_ci(small)[0]


def test_bootstrap_ci_edge_cases_and_determinism():
    data = [0.0, 1.0, 1.0, 0.5, 0.0, 1.0]
    assert bootstrap_ci(data, seed=3) == bootstrap_ci(data, seed=3)
    assert bootstrap_ci([0.7]) == (0.7, 0.7)
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_score_split():
    rewards = [[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]
    answers = [["4", "4", "5", "5"], ["1", "2", "1", None], ["x", "x", "x", "x"]]
    s = score_split(rewards, answers)
    assert s.n_tasks == 3 and s.k == 4
    assert s.mean == pytest.approx(0.5)
    assert s.ci_low <= s.mean <= s.ci_high
    assert s.pass_at_k == pytest.approx(2 / 3)
    assert s.maj_at_k == pytest.approx(2 / 3)
    assert score_split(rewards).maj_at_k is None


def test_paired_lcb_clearly_better_is_positive():
    rng = np.random.default_rng(0)
    incumbent = rng.integers(0, 2, size=200).astype(float)
    challenger = np.where(rng.random(200) < 0.4, 1.0, incumbent)
    assert paired_lcb(challenger.tolist(), incumbent.tolist()) > 0


def test_paired_lcb_identical_and_noisy_equal_are_not_positive():
    base = [1.0, 0.0, 1.0, 1.0, 0.0, 0.5] * 10
    assert paired_lcb(base, base) == 0.0
    noisy = list(base)
    noisy[1], noisy[2], noisy[4], noisy[5] = 1.0, 0.0, 1.0, 0.0  # two wins, two losses: mean diff 0
    assert paired_lcb(noisy, base) <= 0
    one_lucky = list(base)
    one_lucky[1] = 1.0  # a single win on 60 tasks is not evidence
    assert paired_lcb(one_lucky, base) <= 0


def test_paired_lcb_constant_shift_and_length_check():
    assert paired_lcb([0.3, 0.6, 0.9], [0.1, 0.4, 0.7]) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        paired_lcb([1.0, 0.0], [1.0])


def test_decide_acceptance():
    inc = [0.0, 1.0] * 30
    better = [1.0] * 60
    d = decide_acceptance(better, inc)
    assert d.accepted and d.n_tasks == 60 and d.mean_diff == pytest.approx(0.5) and d.lcb > 0
    assert "accepted" in d.reason and "\n" not in d.reason
    same = decide_acceptance(inc, inc)
    assert not same.accepted and same.lcb == 0.0 and "rejected" in same.reason


def brute_force_pass_at_k(outcomes: list[bool], k: int) -> float:
    subsets = list(itertools.combinations(range(len(outcomes)), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_pass_at_k_matches_enumeration_of_k_subsets(n):
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(outcomes, k))


def test_paired_difference():
    a, b = [1.0, 0.5, 0.0, 1.0], [0.5, 0.0, 0.0, 0.5]
    d = paired_difference(a, b)
    assert d.mean_diff == pytest.approx(0.375) and d.n_tasks == 4
    assert d.ci_low <= d.mean_diff <= d.ci_high and d.ci_low >= 0.0
    same = paired_difference(a, a)
    assert (same.mean_diff, same.ci_low, same.ci_high) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        paired_difference(a, b[:2])
