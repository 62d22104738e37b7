"""The race's decisions on simulated challengers: how often one that is no better is accepted (at most
the nominal rate), how often a real gain is, and what the race spends compared with scoring every
challenger on every task."""

from __future__ import annotations

import numpy as np
import pytest

from whale.search.race import RaceSettings, look_sizes, race, sign_flip_p

TASKS = [f"t{i}" for i in range(16)]
ROLLOUTS = 2


def simulate(gains: list[float], rng: np.random.Generator, settings: RaceSettings, coupling: float = 0.5):
    """One race on 16 tasks x 2 rollouts. The incumbent solves task t with probability p_t; challenger i
    with p_t + gains[i] (clipped). With probability `coupling` a challenger's rollout reuses the
    incumbent's random number (common random numbers), as a real run's per-call seeds make it."""
    p = rng.uniform(0.05, 0.6, size=len(TASKS))
    u = rng.uniform(size=(len(TASKS), ROLLOUTS))
    incumbent = {t: float(np.mean(u[i] < p[i])) for i, t in enumerate(TASKS)}
    ids = [f"c{i}" for i in range(len(gains))]

    def score(candidates: list[str], tasks: list[str]) -> dict[str, dict[str, float]]:
        out = {}
        for cid in candidates:
            q = np.clip(p + gains[ids.index(cid)], 0, 1)
            rows = {}
            for t in tasks:
                i = TASKS.index(t)
                own = rng.uniform(size=ROLLOUTS)
                draws = np.where(rng.uniform(size=ROLLOUTS) < coupling, u[i], own)
                rows[t] = float(np.mean(draws < q[i]))
            out[cid] = rows
        return out

    return race(ids, incumbent, TASKS, score, ROLLOUTS, settings, seed=int(rng.integers(1 << 30)))


def test_looks_grow_to_the_whole_split():
    assert look_sizes(16, RaceSettings()) == [4, 8, 16]
    assert look_sizes(3, RaceSettings()) == [3]
    assert look_sizes(10, RaceSettings(first_look=4, growth=1.5)) == [4, 6, 9, 10]


def test_sign_flip_p_is_exact_enough_and_one_sided():
    rng = np.random.default_rng(0)
    assert sign_flip_p(np.zeros(8), rng) == 1.0
    all_up = sign_flip_p(np.ones(6), rng, flips=20_000)
    assert all_up == pytest.approx(2**-6, abs=0.004)  # exact: only the all-plus pattern is as extreme
    assert sign_flip_p(-np.ones(6), rng) > 0.95


@pytest.mark.parametrize("coupling", [0.0, 0.5, 0.9])
def test_a_challenger_no_better_than_the_incumbent_is_accepted_at_most_at_the_nominal_rate(coupling):
    settings = RaceSettings(alpha=0.05, flips=2_000)
    rng = np.random.default_rng(7)
    races = 1_000
    accepted = sum(simulate([0.0, 0.0], rng, settings, coupling).accepted is not None for _ in range(races))
    rate = accepted / races
    assert rate <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / races), rate  # nominal plus three standard errors


def test_a_real_gain_is_usually_accepted_and_the_better_challenger_wins():
    settings = RaceSettings(flips=2_000)
    rng = np.random.default_rng(3)
    results = [simulate([0.0, 0.35], rng, settings) for _ in range(200)]
    winners = [r.accepted for r in results]
    assert winners.count("c1") / len(results) >= 0.7  # 16 tasks x 2 rollouts: power is bounded by the split
    assert winners.count("c0") / len(results) <= 0.05


def test_clear_losers_are_dropped_early_for_fewer_rollouts_than_a_full_evaluation():
    settings = RaceSettings(flips=2_000)
    rng = np.random.default_rng(5)
    full = 2 * len(TASKS) * ROLLOUTS  # both challengers on every task, the fixed evaluation
    results = [simulate([-0.4, -0.4], rng, settings) for _ in range(100)]
    assert all(r.accepted is None for r in results)
    assert np.mean([r.rollouts for r in results]) < 0.6 * full
    assert all(e.status == "dropped" for r in results for e in r.entries if r.tasks_seen < len(TASKS))
