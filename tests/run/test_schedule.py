"""Each schedule's phase sequence on a scripted signal."""

import json
import random

import pytest

from whale.core.config import ScheduleConfig, load_config
from whale.run.schedule import (
    HARNESS,
    HARNESS_ONLY,
    METHODS,
    WEIGHTS,
    AdaptiveAlternation,
    FixedAlternation,
    Patience,
    ScheduleState,
    SinglePhase,
    Stagewise,
    UnitReport,
    build_schedule,
    measured_gains,
    weight_phase_steps,
    window_stats,
)


def drive(schedule, reports):
    """Feed reports one by one; returns the phase kind of every unit and the switch decisions."""
    state, kinds, switches = schedule.initial(), [], []
    for make in reports:
        report = make(state.kind)
        kinds.append(state.kind)
        decision = schedule.advance(state, report)
        if decision.switched:
            switches.append(decision)
        state = ScheduleState(**json.loads(json.dumps(decision.state.to_json())))  # survives a resume
    return kinds, switches


def weights_signal(values):
    """A report factory per unit: weight steps get the next scripted reward, harness units no gain."""
    it = iter(values)
    return [lambda kind, v=v: UnitReport(kind, v) for v in it]


def test_fixed_alternation_sequence():
    kinds, switches = drive(FixedAlternation(3, 2), [lambda k: UnitReport(k, 0.0)] * 10)
    assert kinds == [WEIGHTS] * 3 + [HARNESS] * 2 + [WEIGHTS] * 3 + [HARNESS] * 2
    assert [s.reason for s in switches] == ["fixed length"] * 4
    kinds, _ = drive(FixedAlternation(1, 2, start=HARNESS), [lambda k: UnitReport(k, 0.0)] * 6)
    assert kinds == [HARNESS, HARNESS, WEIGHTS, HARNESS, HARNESS, WEIGHTS]


def test_single_phase_never_switches():
    for kind in (WEIGHTS, HARNESS):
        kinds, switches = drive(SinglePhase(kind), [lambda k: UnitReport(k, 1.0, True)] * 7)
        assert kinds == [kind] * 7 and not switches


def test_stagewise_switches_once_when_its_share_is_spent():
    spent = iter(range(100, 2000, 100))
    reports = [lambda k: UnitReport(k, 0.0, rollouts=next(spent), limit=1000)] * 10
    kinds, switches = drive(Stagewise(WEIGHTS, 0.3), reports)
    assert kinds == [WEIGHTS] * 3 + [HARNESS] * 7
    assert len(switches) == 1 and switches[0].signals["rollouts"] == 300
    spent = iter(range(100, 2000, 100))
    reports = [lambda k: UnitReport(k, 0.0, rollouts=next(spent), limit=1000)] * 10
    kinds, _ = drive(Stagewise(HARNESS, 0.5), reports)
    assert kinds == [HARNESS] * 5 + [WEIGHTS] * 5


def test_window_stats():
    assert window_stats([0.5], 3) == (0.5, 0.0)
    mean, se = window_stats([9.0, 1.0, 2.0, 3.0], 3)
    assert mean == 2.0 and se == pytest.approx((1.0 / 3) ** 0.5)


ADAPTIVE = AdaptiveAlternation(Patience(2, 2, 6), Patience(2, 1, 4), window=1)


def test_adaptive_weight_phase_ends_exactly_when_patience_runs_out():
    # rewards rise for three steps, then stall: the phase ends after two stalled steps (step 5)
    rewards = [0.1, 0.2, 0.3, 0.3, 0.25, 0.9]
    kinds, switches = drive(ADAPTIVE, weights_signal(rewards))
    assert kinds[:6] == [WEIGHTS] * 5 + [HARNESS]
    assert switches[0].reason == "patience ran out"
    assert switches[0].signals["stale"] == 2 and switches[0].signals["best"] == 0.3


def test_adaptive_improvement_must_exceed_noise():
    """Window 3: the smoothed reward must beat the best by more than the window's standard error."""
    rule = AdaptiveAlternation(Patience(5, 1, 20), Patience(5, 1, 20), window=3)

    def feed(values):
        state, decision = rule.initial(), None
        for v in values:
            decision = rule.advance(state, UnitReport(WEIGHTS, v))
            state = decision.state
        return decision

    noisy = feed([0.0, 1.0])  # window mean 0.5 against best 0.0, but its standard error is 0.5 too
    assert noisy.state.stale == 1 and noisy.state.best == 0.0 and noisy.signals["stderr"] == 0.5
    jump = feed([0.1, 0.1, 0.1, 0.7])  # one high step moves the mean by exactly its own noise: not yet
    assert jump.state.stale == 3 and jump.state.best == 0.1
    held = feed([0.1, 0.1, 0.1, 0.7, 0.7])  # the second high step is a real improvement
    assert held.state.stale == 0 and held.state.best == pytest.approx(0.5)


def test_adaptive_respects_min_and_max():
    # flat reward: the min length (2) holds the phase open even though patience would end it sooner
    rule = AdaptiveAlternation(Patience(1, 3, 5), Patience(1, 1, 4), window=1)
    kinds, switches = drive(rule, weights_signal([0.5] * 4))
    assert kinds == [WEIGHTS] * 3 + [HARNESS]
    # rising reward never runs out of patience: the max length ends the phase
    kinds, switches = drive(rule, weights_signal([0.1 * i for i in range(7)]))
    assert kinds[:6] == [WEIGHTS] * 5 + [HARNESS] and switches[0].reason == "max phase length"


def test_adaptive_harness_phase_counts_iterations_without_acceptance():
    accepted = iter([True, False, True, False, False, False])

    def report(kind):
        return UnitReport(kind, 0.5, improved=next(accepted)) if kind == HARNESS else UnitReport(kind, 0.0)

    rule = AdaptiveAlternation(Patience(2, 1, 4), Patience(2, 1, 10), window=1, start=HARNESS)
    kinds, switches = drive(rule, [report] * 6)
    assert kinds == [HARNESS] * 5 + [WEIGHTS]
    assert switches[0].reason == "patience ran out" and switches[0].signals["accepted"] is False


@pytest.mark.parametrize("method", METHODS)
def test_every_method_is_buildable_from_config(method):
    cfg = load_config("tiny", overrides=[f"schedule.method={method}"])
    schedule = build_schedule(cfg.schedule)
    expected = HARNESS if method in (*HARNESS_ONLY, "stagewise-harness-first") else WEIGHTS
    assert schedule.initial().kind == expected


def test_weight_phase_length_in_epochs_of_the_train_split():
    """The paper's E = 0.6 epoch: 0.6 x train tasks / tasks per step, rounded up, replaces weight_steps."""
    cfg = load_config("tiny", overrides=["schedule.weight_epochs=0.6", "schedule.search_iters=2"])
    schedule = build_schedule(cfg.schedule, train_tasks=50, tasks_per_step=4)  # 7.5 -> 8 steps
    kinds, switches = drive(schedule, weights_signal([0.0] * 11))
    assert kinds == [WEIGHTS] * 8 + [HARNESS] * 2 + [WEIGHTS]
    assert switches[0].signals == {"done_in_phase": 8}
    assert weight_phase_steps(cfg.schedule, 8960, 128) == 42  # exactly 42.0: no step added by rounding
    assert weight_phase_steps(cfg.schedule, 10, 64) == 1  # never a zero-length phase
    assert weight_phase_steps(load_config("tiny").schedule, 8960, 128) == 2  # unset: weight_steps


def test_a_harness_phase_that_accepts_nothing_ends_on_patience_before_its_maximum():
    """The phase's starting incumbent is the baseline: the first iteration without acceptance is stale."""
    rule = AdaptiveAlternation(Patience(2, 2, 6), Patience(2, 1, 3), window=3, start=HARNESS)
    kinds, switches = drive(rule, [lambda k: UnitReport(k, 0.4, improved=False)] * 3)
    assert kinds == [HARNESS, HARNESS, WEIGHTS]
    assert switches[0].reason == "patience ran out" and switches[0].signals["stale"] == 2


def test_the_second_weight_step_can_improve_on_the_first_by_more_than_binomial_noise():
    rule = AdaptiveAlternation(Patience(2, 2, 6), Patience(2, 1, 3), window=3)
    first = rule.advance(rule.initial(), UnitReport(WEIGHTS, 0.10, samples=64))
    assert first.state.stale == 0 and first.state.best == 0.10  # the baseline
    rose = rule.advance(first.state, UnitReport(WEIGHTS, 0.40, samples=64))
    # window mean 0.25, binomial standard error sqrt(0.25 * 0.75 / 128) = 0.038 above 0.10: an improvement
    assert rose.state.stale == 0 and rose.state.best == pytest.approx(0.25)
    assert rose.signals["stderr"] == pytest.approx((0.25 * 0.75 / 128) ** 0.5, abs=1e-4)
    flat = rule.advance(first.state, UnitReport(WEIGHTS, 0.12, samples=64))
    assert flat.state.stale == 1 and flat.state.best == 0.10


def test_the_config_refuses_phase_maximums_that_leave_patience_no_room():
    with pytest.raises(ValueError, match="never ends a phase before its maximum"):
        load_config("tiny", overrides=["schedule.adaptive.max_search_iters=2"])
    with pytest.raises(ValueError, match="never ends a phase before its maximum"):
        load_config("tiny", overrides=["schedule.adaptive.max_weight_steps=3"])
    assert load_config("tiny", overrides=["schedule.adaptive.max_weight_steps=4"]).schedule.adaptive


# ---- whale-gain -------------------------------------------------------------------------------------------


def simulate_gain_schedule(harness_edge: float, seed: int, phases: int = 30) -> list[str]:
    """whale-gain in a simulated world: a weight step raises the train reward by 0.01, a search iteration
    accepts a gain of 0.01 + `harness_edge` (both with noise), each unit costs 16 rollouts. The kind of
    every phase."""
    schedule = build_schedule(ScheduleConfig(method="whale-gain"), seed=seed)
    state, rollouts, reward, score, noise = schedule.initial(), 0, 0.2, 0.2, random.Random(seed)
    kinds = [state.kind]
    while len(kinds) < phases:
        rollouts += 16
        if state.kind == WEIGHTS:
            reward += 0.01 + noise.gauss(0, 0.004)
            report = UnitReport(WEIGHTS, reward, rollouts=rollouts)
        else:
            gain = max(0.0, 0.01 + harness_edge + noise.gauss(0, 0.004))
            report = UnitReport(HARNESS, score + gain, gain > 0, rollouts, before=score)
            score += gain
        decision = schedule.advance(state, report)
        state = ScheduleState(**json.loads(json.dumps(decision.state.to_json())))  # survives a resume
        if decision.switched:
            kinds.append(state.kind)
            assert decision.signals["why"].startswith(("probe", "explore", "gain"))
    return kinds


def longest_streak(kinds: list[str]) -> int:
    best = run = 0
    for i, kind in enumerate(kinds):
        run = run + 1 if i and kinds[i - 1] == kind else 1
        best = max(best, run)
    return best


def test_whale_gain_probes_each_side_then_favours_the_larger_gain_more_as_the_gap_grows_and_explores():
    shares = []
    for edge in (-0.006, 0.0, 0.006, 0.03):
        runs = [simulate_gain_schedule(edge, seed) for seed in range(20)]
        assert all(kinds[:2] == [WEIGHTS, HARNESS] for kinds in runs)  # the probes
        chosen = [kinds[2:] for kinds in runs]
        shares.append(sum(k.count(HARNESS) for k in chosen) / sum(len(k) for k in chosen))
        assert all(longest_streak(kinds) <= 4 for kinds in runs)  # explore_every: the other side runs
    assert shares == sorted(shares) and shares[0] < 0.5 < shares[-1], shares
    assert shares[-1] < 1.0  # a side far behind still runs now and then


def test_whale_gain_records_the_numbers_behind_each_choice():
    schedule = build_schedule(ScheduleConfig(method="whale-gain"), seed=3)
    gains = {WEIGHTS: [0.002, 0.001], HARNESS: [0.0005]}
    kind, signals = schedule.choose(gains, [WEIGHTS, HARNESS, WEIGHTS], phase=4, measured={})
    assert kind in (WEIGHTS, HARNESS) and set(signals) == {"why", "gains", "means", "draws", "basis"}
    assert signals["means"][WEIGHTS] == pytest.approx(0.0015) and json.dumps(signals)
    assert signals["basis"] == "phase signals"
    assert schedule.choose(gains, [WEIGHTS, HARNESS, WEIGHTS], 4, {}) == (kind, signals)  # seeded
    assert schedule.choose({WEIGHTS: [0.1]}, [WEIGHTS], 1, {})[0] == HARNESS  # probe the unmeasured side
    forced, why = schedule.choose(gains, [WEIGHTS] * 4, 5, {})
    assert forced == HARNESS and why["why"].startswith("explore")


def test_measured_gains_are_val_effects_per_rollout_of_the_side_that_spent_them():
    first = measured_gains(None, None, 0, 0)  # point 0: nothing measured yet
    assert first == {WEIGHTS: [], HARNESS: [], "at": {WEIGHTS: 0, HARNESS: 0}}
    effects = {"weights": [0.2, 0.0], "harness": [0.0, 0.0]}
    after = measured_gains(first, effects, 100, 0)  # only training spent: the harness measured nothing
    assert after[WEIGHTS] == [pytest.approx(0.001)] and after[HARNESS] == []
    both = measured_gains(after, {"weights": [0.1, 0.1], "harness": [0.3, 0.1]}, 150, 40)
    assert both[WEIGHTS] == [pytest.approx(0.001), pytest.approx(0.002)]
    assert both[HARNESS] == [pytest.approx(0.005)]
    apportioned = measured_gains(both, None, 200, 60)  # both changed and no corners: nothing added
    assert apportioned[WEIGHTS] == both[WEIGHTS] and apportioned["at"] == {WEIGHTS: 200, HARNESS: 60}


def test_whale_gain_chooses_from_the_measured_gains_once_both_sides_have_one():
    schedule = build_schedule(ScheduleConfig(method="whale-gain"), seed=3)
    phase_signals = {WEIGHTS: [0.01, 0.01, 0.01], HARNESS: [-0.01, -0.01, -0.01]}  # weights ahead
    ran = [WEIGHTS, HARNESS, WEIGHTS]
    assert schedule.choose(phase_signals, ran, 4, {WEIGHTS: [0.001]})[0] == WEIGHTS  # one side measured
    measured = {WEIGHTS: [-0.002, -0.002], HARNESS: [0.003, 0.003]}  # on val, the harness is ahead
    kind, signals = schedule.choose(phase_signals, ran, 4, measured)
    assert kind == HARNESS and signals["basis"] == "measured on val" and signals["measured"] == measured
    assert "measured on val" in signals["why"]
