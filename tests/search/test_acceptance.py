"""The acceptance rule: one object for every method, and what each rule does (real sandbox workers)."""

from __future__ import annotations

import pytest
from conftest import AddDomain

from whale.core.config import METHODS, load_config
from whale.harness.calls import RunnerLimits
from whale.harness.records import HarnessCandidate
from whale.harness.runner import RolloutRunner
from whale.model.engine import SamplingParams
from whale.search.acceptance import Argmax, Paired, Race, Trial, Verdict, build_acceptance
from whale.search.archive import Archive, CandidateEval
from whale.search.proposer import Proposal, ProposalRequest
from whale.search.race import RaceSettings
from whale.search.scoring import evaluate_candidate
from whale.search.search_step import SearchSettings, harness_step, population_step

WRONG = 'def run(task, llm, tools):\n    llm.chat([{"role": "user", "content": "guess"}])\n    return "0"\n'


class ListProposer:
    name = "list"

    def __init__(self, sources: list[str]):
        self.sources = sources

    def propose(self, request: ProposalRequest) -> Proposal:
        return Proposal(
            [
                HarnessCandidate(request.next_id(), s, request.parents[0].id, "v", self.name)
                for s in self.sources
            ]
        )


class CountingAcceptance:
    """Wraps the configured rule and counts the decisions routed through it."""

    name = "counting"

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def judge(self, trial: Trial, challengers: list[HarnessCandidate], incumbent: CandidateEval) -> Verdict:
        self.calls.append([c.id for c in challengers])
        return self.inner.judge(trial, challengers, incumbent)


@pytest.fixture
def many():
    return AddDomain(24)


@pytest.fixture
def runner(fake_engine, many):
    r = RolloutRunner(fake_engine, many, SamplingParams(max_tokens=4), RunnerLimits(workers=4))
    yield r
    r.close()


def seeded(tmp_path, runner, domain, source=WRONG):
    archive = Archive(tmp_path / "search")
    seed = HarnessCandidate("c0000", source, None, "seed", "seed")
    archive.add(seed, status="seed")
    ev, _ = evaluate_candidate(runner, archive, seed, domain.tasks, 1)
    return archive, seed, ev


@pytest.mark.parametrize("method", METHODS)
def test_every_method_gets_the_same_rule_from_the_config(method):
    for kind, rule in (
        ("race", Race(RaceSettings(alpha=0.1))),
        ("paired", Paired(0.1)),
        ("argmax", Argmax()),
    ):
        cfg = load_config(
            "tiny", overrides=[f"schedule.method={method}", f"search.acceptance={kind}", "search.alpha=0.1"]
        )
        assert SearchSettings.from_config(cfg, "").acceptance == rule
    assert SearchSettings.from_config(
        load_config("tiny", overrides=[f"schedule.method={method}"]), ""
    ).acceptance == Race(RaceSettings(alpha=0.05))  # the default


def test_both_search_steps_decide_through_the_settings_rule(tmp_path, runner, many):
    archive, seed, ev = seeded(tmp_path, runner, many)
    rule = CountingAcceptance(Race())
    settings = SearchSettings(1, 1, 1, "", population=2, acceptance=rule)
    harness_step(runner, archive, ListProposer([WRONG + "\nA = 1\n"]), seed, ev, many.tasks, settings, 0)
    population_step(runner, archive, ListProposer([WRONG + "\nB = 1\n"]), [ev], many.tasks, settings, 1)
    assert rule.calls == [["c0001"], ["c0002"]]


def test_a_race_winner_is_completed_on_the_tasks_the_race_did_not_reach(tmp_path, runner, many):
    archive, seed, ev = seeded(tmp_path, runner, many)
    result = harness_step(
        runner, archive, ListProposer([many.seed_harness()]), seed, ev, many.tasks,
        SearchSettings(1, 1, 1, "", acceptance=Race()), 0,
    )  # fmt: skip
    assert result.accepted and "after 16 tasks" in result.reason  # looks at 4, 8, 16, 24 tasks
    assert result.decision_rollouts == 16
    assert set(result.incumbent_eval.per_task) == {t.id for t in many.tasks}
    assert len(result.rollouts) == 1 + 16 + 8  # smoke, race, completion
    again = harness_step(
        runner, archive, ListProposer([many.seed_harness() + "\nC = 1\n"]), result.incumbent,
        result.incumbent_eval, many.tasks, SearchSettings(1, 1, 1, "", acceptance=Race()), 1,
    )  # fmt: skip
    assert not again.accepted and again.incumbent.id == result.incumbent.id


def test_a_race_the_budget_cannot_pay_for_ends_undecided_within_it(tmp_path, runner, many):
    """The run's last unit is cut to fit: the race stops before the look it cannot pay for, accepts
    nothing (stopping early only removes chances to pass) and says so."""
    archive, seed, ev = seeded(tmp_path, runner, many)
    settings = SearchSettings(1, 1, 1, "", acceptance=Race())
    proposer = ListProposer([many.seed_harness()])
    result = harness_step(runner, archive, proposer, seed, ev, many.tasks, settings, 0, room=1 + 8 + 7)
    assert result.cut and not result.accepted and result.incumbent.id == "c0000"
    assert len(result.rollouts) == 1 + 8  # the smoke test and the looks at 4 and 8 tasks; 16 needs 8 more
    assert result.reason == "no decision: the budget ran out before look 3, after 8 tasks, 8 rollouts"
    assert archive.meta("c0001")["status"] == "rejected"
    unrun = harness_step(
        runner, archive, ListProposer([many.seed_harness() + "\nF = 1\n"]), seed, ev, many.tasks, settings, 1,
        room=0,
    )  # fmt: skip
    assert unrun.cut and unrun.rollouts == [] and archive.meta("c0002")["status"] == "unrun"
    full = Trial(runner, archive, many.tasks, 1, 0, room=30)
    verdict = Argmax().judge(full, [archive.load("c0001"), archive.load("c0002")], ev)
    assert verdict.accepted == "c0001" and verdict.rejected == {}  # the only one the budget could score
    assert full.cut and len(full.rollouts) == 24


def test_argmax_takes_any_higher_mean_and_no_tie(tmp_path, runner, many):
    archive, seed, ev = seeded(tmp_path, runner, many)
    trial = Trial(runner, archive, many.tasks, 1, 0)
    tie = HarnessCandidate("c0001", WRONG + "\nD = 1\n", "c0000", "v", "list")
    better = HarnessCandidate("c0002", many.seed_harness(), "c0000", "v", "list")
    for cand in (tie, better):
        archive.add(cand)
    assert Argmax().judge(trial, [tie], ev).accepted is None
    verdict = Argmax().judge(trial, [tie, better], ev)
    assert (
        verdict.accepted == "c0002" and verdict.decision_rollouts == 2 * 24
    )  # both challengers on every task


def test_a_population_leader_changes_only_by_the_rule(tmp_path, runner, many):
    archive, seed, ev = seeded(tmp_path, runner, many, many.seed_harness())
    settings = SearchSettings(1, 1, 1, "", population=2, acceptance=Race())
    result = population_step(
        runner, archive, ListProposer([many.seed_harness() + "\nE = 1\n"]), [ev], many.tasks, settings, 0
    )
    assert not result.accepted and result.population[0].candidate_id == "c0000"
    assert [e.candidate_id for e in result.population] == ["c0000", "c0001"]  # a tie: kept as a parent
    assert archive.meta("c0001")["status"] == "population"


def test_a_prompts_only_population_refuses_a_child_that_changes_code(tmp_path, runner, many):
    """Fast-Slow's children may reword string constants only, whatever proposer wrote them."""
    archive, seed, ev = seeded(tmp_path, runner, many)
    settings = SearchSettings(2, 1, 1, "", population=2, acceptance=Race(), prompts_only=True)
    reworded, recoded = WRONG.replace('"guess"', '"guess a number"'), WRONG.replace('"0"', '"1"[::-1]')
    proposer = ListProposer([reworded, recoded])
    result = population_step(runner, archive, proposer, [ev], many.tasks, settings, 0)
    assert result.failed == {"c0002": "prompts-only: it changes code outside string constants"}
    assert archive.meta("c0002")["status"] == "invalid"
    assert [e.candidate_id for e in result.evaluated] == ["c0001"]


def test_an_unknown_rule_names_the_choices():
    with pytest.raises(ValueError, match="race, paired, argmax"):
        build_acceptance("vote", 0.05)


def test_a_promising_challenger_is_extended_with_the_incumbent_on_fresh_samples(tmp_path, fake_engine):
    domain = AddDomain(16)
    runner = RolloutRunner(fake_engine, domain, SamplingParams(max_tokens=4), RunnerLimits(workers=4))
    try:
        archive, seed, ev = seeded(tmp_path, runner, domain)
        three = domain.seed_harness().replace("def run(", "def run_all(", 1) + (
            "\n\ndef run(task, llm, tools):\n    return run_all(task, llm, tools) if task['a'] < 3 else '0'\n"
        )
        result = harness_step(
            runner, archive, ListProposer([three]), seed, ev, domain.tasks,
            SearchSettings(1, 1, 1, "", acceptance=Race()), 0,
        )  # fmt: skip
    finally:
        runner.close()
    assert not result.accepted and "extended 1x" in result.reason  # right on 3 tasks: p 1/8 at best
    assert result.decision_rollouts == 16 + 2 * (16 + 16)  # the race, then two rounds with the incumbent
    assert len(result.rollouts) == 1 + result.decision_rollouts
    stored = result.evaluated[0]
    assert stored.rollouts == 16 and stored.mean == 3 / 16  # sample 0 only, like the incumbent's score
