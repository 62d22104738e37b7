"""Paired acceptance and one search iteration (real sandbox workers, test domain and engine)."""

from __future__ import annotations

import pytest

from whale.core.files import read_json, read_jsonl
from whale.core.stats import decide_acceptance
from whale.harness.calls import RunnerLimits
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.runner import RolloutRunner
from whale.model.engine import SamplingParams
from whale.search.acceptance import Argmax, Paired, Race
from whale.search.archive import Archive
from whale.search.proposer import Proposal, ProposalRequest
from whale.search.scoring import evaluate_candidate, summarize
from whale.search.search_step import SearchSettings, harness_step, population_step

WRONG = 'def run(task, llm, tools):\n    llm.chat([{"role": "user", "content": "guess"}])\n    return "0"\n'
INVALID = "import os\n\n\ndef run(task, llm, tools):\n    return os.getcwd()\n"
CRASHES = "def run(task, llm, tools):\n    raise RuntimeError('always')\n"


class ListProposer:
    """Hands out fixed sources as new candidates (a stand-in for any proposer with `propose`)."""

    name = "list"

    def __init__(self, sources: list[str]):
        self.sources = sources
        self.calls = []

    def propose(self, request: ProposalRequest) -> Proposal:
        parents, n = request.parents, request.n
        self.calls.append(([p.id for p in parents], set(request.seen), n))
        return Proposal([HarnessCandidate(request.next_id(), s, parents[0].id, f"variant {i}", self.name)
                         for i, s in enumerate(self.sources[:n])])  # fmt: skip


@pytest.fixture
def runner(fake_engine, add_domain):
    r = RolloutRunner(fake_engine, add_domain, SamplingParams(max_tokens=4), RunnerLimits(workers=4))
    yield r
    r.close()


def test_identical_scores_are_not_accepted():
    scores = [1.0, 0.0, 0.5, 1.0, 0.0, 0.25] * 3
    d = decide_acceptance(list(scores), list(scores))
    assert not d.accepted and d.mean_diff == 0.0 and d.lcb == 0.0 and d.n_tasks == 18
    assert d.reason.startswith("rejected")


def test_clearly_better_is_accepted_and_one_lucky_task_is_not():
    incumbent = [0.0, 0.5, 0.0, 0.25, 0.0, 0.5, 0.0, 0.0, 0.25, 0.0] * 2
    better = [min(1.0, x + 0.5) for x in incumbent]
    d = decide_acceptance(better, incumbent, seed=3)
    assert d.accepted and d.lcb > 0 and d.mean_diff == pytest.approx(0.5)
    assert d.reason.startswith("accepted")
    lucky = list(incumbent)
    lucky[0] = 1.0
    d = decide_acceptance(lucky, incumbent, seed=3)
    assert d.mean_diff > 0 and not d.accepted
    worse = decide_acceptance(incumbent, better, seed=3)
    assert not worse.accepted and worse.mean_diff < 0


def test_search_iteration_records_invalid_and_failed_candidates_and_accepts_a_better_one(
    tmp_path, runner, add_domain, fake_engine
):
    archive = Archive(tmp_path / "search")
    incumbent = HarnessCandidate("c0000", WRONG, None, "seed harness", "seed")
    archive.add(incumbent, status="seed")
    tasks = add_domain.tasks
    # phase start: the incumbent is (re-)evaluated under the current weights
    inc_eval, inc_rollouts = evaluate_candidate(runner, archive, incumbent, tasks, 1)
    assert inc_eval.weights_version == "w-fake" and inc_eval.mean == 0.0
    assert set(inc_eval.per_task) == {t.id for t in tasks} and len(inc_rollouts) == len(tasks)
    assert inc_eval.calls_per_rollout == 1.0 and inc_eval.tokens_per_rollout == 4.0

    proposer = ListProposer([INVALID, CRASHES, add_domain.seed_harness()])
    result = harness_step(
        runner, archive, proposer, incumbent, inc_eval, tasks,
        SearchSettings(3, 1, 2, "", acceptance=Paired()), 0,
    )  # fmt: skip
    (parents, seen, n), *_ = proposer.calls
    assert parents[0] == "c0000" and n == 3 and len(seen) == 1

    assert archive.ids() == ["c0000", "c0001", "c0002", "c0003"]
    invalid = archive.meta("c0001")
    assert invalid["status"] == "invalid"
    assert "line 1" in invalid["reason"] and "'os'" in invalid["reason"]
    assert not (tmp_path / "search" / "candidates" / "c0001" / "evals").exists()  # never run
    failed = archive.meta("c0002")
    assert failed["status"] == "failed" and "smoke test" in failed["reason"] and "always" in failed["reason"]
    assert archive.meta("c0003")["status"] == "accepted"
    assert set(result.failed) == {"c0001", "c0002"}

    assert result.accepted and result.incumbent.id == "c0003"
    assert result.incumbent.source == add_domain.seed_harness()
    assert result.incumbent_eval.mean == 1.0 and result.reason.startswith("c0003 vs c0000: accepted")
    assert [e.candidate_id for e in result.evaluated] == ["c0003"]
    assert len(result.rollouts) == 2 + 2 + len(tasks)  # two smoke tests, then one full evaluation

    frontier = read_json(tmp_path / "search" / "frontier.json")
    assert frontier["weights_version"] == "w-fake"
    assert [c["id"] for c in frontier["candidates"]] == ["c0003"]
    summary = read_jsonl(tmp_path / "search" / "evolution_summary.jsonl")
    assert [(s["candidate_id"], s["mean"]) for s in summary] == [("c0000", 0.0), ("c0003", 1.0)]
    traces = read_jsonl(tmp_path / "search" / "candidates" / "c0003" / "traces" / "w-fake.jsonl")
    assert len(traces) == len(tasks) and all(t["reward"] == 1.0 for t in traces)


def test_search_iteration_keeps_the_incumbent_when_no_challenger_is_better(tmp_path, runner, add_domain):
    archive = Archive(tmp_path / "search")
    good = HarnessCandidate("c0000", add_domain.seed_harness(), None, "seed", "seed")
    archive.add(good, status="seed")
    inc_eval, _ = evaluate_candidate(runner, archive, good, add_domain.tasks, 1)
    assert inc_eval.mean == 1.0
    same_score = add_domain.seed_harness() + "\n\nUNUSED = 1\n"
    result = harness_step(
        runner, archive, ListProposer([same_score, WRONG]), good, inc_eval, add_domain.tasks,
        SearchSettings(2, 1, 1, "", acceptance=Paired()), 0,
    )  # fmt: skip
    assert not result.accepted and result.incumbent.id == "c0000" and result.incumbent_eval is inc_eval
    assert result.reason.startswith("c0001 vs c0000: rejected")
    assert archive.meta("c0001")["status"] == "rejected"
    assert archive.meta("c0002")["status"] == "rejected"  # ran fine, scored 0: not the best challenger
    assert archive.meta("c0002")["reason"] == "paired: not the best"
    assert sorted(e.candidate_id for e in result.evaluated) == ["c0001", "c0002"]


def test_search_iteration_with_only_invalid_candidates_still_completes(tmp_path, runner, add_domain):
    archive = Archive(tmp_path / "search")
    good = HarnessCandidate("c0000", add_domain.seed_harness(), None, "seed", "seed")
    archive.add(good, status="seed")
    inc_eval, _ = evaluate_candidate(runner, archive, good, add_domain.tasks, 1)
    broken = "def run(task, llm, tools)\n    return '1'\n"
    result = harness_step(
        runner, archive, ListProposer([INVALID, broken]), good, inc_eval, add_domain.tasks,
        SearchSettings(2, 1, 2, ""), 0,
    )  # fmt: skip
    assert not result.accepted and result.reason == "no valid challenger" and result.rollouts == []
    assert [archive.meta(c)["status"] for c in ("c0001", "c0002")] == ["invalid", "invalid"]
    assert "syntax error" in archive.meta("c0002")["reason"]
    # the next iteration reads an archive holding unparsable code and carries on
    again = harness_step(
        runner, archive, ListProposer([WRONG]), good, inc_eval, add_domain.tasks,
        SearchSettings(1, 1, 1, "", acceptance=Paired()), 1,
    )  # fmt: skip
    assert archive.ids()[-1] == "c0003" and not again.accepted
    assert archive.meta("c0003")["status"] == "rejected"


def test_summarize_averages_per_task_first():
    rollouts = [Rollout("a", "h", "w", s, reward=1.0) for s in range(3)]
    rollouts.append(Rollout("b", "h", "w", 0, reward=0.0, error="x"))
    ev = summarize("h", "w", rollouts)
    assert ev.per_task == {"a": 1.0, "b": 0.0} and ev.mean == 0.5 and ev.errors == 1


def test_population_iteration_keeps_the_top_members_and_records_who_was_dropped(tmp_path, runner, add_domain):
    archive = Archive(tmp_path / "search")
    seed = HarnessCandidate("c0000", WRONG, None, "seed", "seed")
    archive.add(seed, status="seed")
    seed_eval, _ = evaluate_candidate(runner, archive, seed, add_domain.tasks, 1)
    good = add_domain.seed_harness()
    proposer = ListProposer([good, INVALID, good + "\n\nUNUSED = 2\n"])
    result = population_step(
        runner, archive, proposer, [seed_eval], add_domain.tasks,
        SearchSettings(3, 1, 1, "", population=2, acceptance=Argmax()), 0,
    )  # fmt: skip
    assert [e.candidate_id for e in result.population] == ["c0001", "c0003"]  # both 1.0; c0000 scored 0
    assert [e.mean for e in result.population] == [1.0, 1.0]
    assert set(result.failed) == {"c0002"}
    assert archive.meta("c0000")["status"] == "seed"  # the seed keeps its mark even when dropped
    assert [archive.meta(c)["status"] for c in ("c0001", "c0002", "c0003")] == [
        "population", "invalid", "population",
    ]  # fmt: skip
    assert len(result.rollouts) == 2 + 2 * len(add_domain.tasks)
    again = population_step(
        runner, archive, ListProposer([WRONG + "\nX = 1\n"]), result.population, add_domain.tasks,
        SearchSettings(1, 1, 1, "", population=2, acceptance=Argmax()), 0,
    )  # fmt: skip
    assert [e.candidate_id for e in again.population] == ["c0001", "c0003"]
    assert archive.meta("c0004")["status"] == "dropped"


def test_duplicate_code_is_recorded_and_not_run_again(tmp_path, runner, add_domain):
    archive = Archive(tmp_path / "search")
    seed = HarnessCandidate("c0000", WRONG, None, "seed", "seed")
    archive.add(seed, status="seed")
    seed_eval, _ = evaluate_candidate(runner, archive, seed, add_domain.tasks, 1)
    reworded = '"""Same code, new docstring."""\n\n\n' + WRONG.replace("return", "# a comment\n    return")
    good = add_domain.seed_harness()
    result = harness_step(
        runner, archive, ListProposer([reworded, good, good + "\n# trailing comment\n"]), seed, seed_eval,
        add_domain.tasks, SearchSettings(3, 1, 1, "", acceptance=Paired()), 0,
    )  # fmt: skip
    assert archive.meta("c0001") | {"status": "duplicate"} == archive.meta("c0001")
    assert archive.meta("c0001")["reason"] == "same code as c0000"
    assert archive.meta("c0003")["reason"] == "same code as c0002"
    assert [e.candidate_id for e in result.evaluated] == ["c0002"]
    assert len(result.rollouts) == 1 + len(add_domain.tasks)  # one smoke test, one evaluation


def test_a_race_accepts_a_clearly_better_challenger_and_drops_one_that_cannot_pass(
    tmp_path, runner, add_domain
):
    archive = Archive(tmp_path / "search")
    seed = HarnessCandidate("c0000", WRONG, None, "seed", "seed")
    archive.add(seed, status="seed")
    tasks = add_domain.tasks
    seed_eval, _ = evaluate_candidate(runner, archive, seed, tasks, 1)
    settings = SearchSettings(2, 1, 1, "", acceptance=Race())
    proposer = ListProposer([WRONG + "\nX = 1\n", add_domain.seed_harness()])
    result = harness_step(runner, archive, proposer, seed, seed_eval, tasks, settings, 0)
    assert result.accepted and result.incumbent.id == "c0002" and result.incumbent_eval.mean == 1.0
    assert archive.meta("c0002")["status"] == "accepted" and "accepted" in result.reason
    dropped = archive.meta("c0001")
    assert dropped["status"] == "rejected" and "cannot pass" in dropped["reason"]
    # c0001 ran on the first look's 4 tasks only; c0002 on all 6; one smoke rollout each before that
    assert result.decision_rollouts == 4 + len(tasks)
    assert len(result.rollouts) == 2 + result.decision_rollouts
    assert sorted(e.candidate_id for e in result.evaluated) == ["c0001", "c0002"]
    assert len(read_jsonl(tmp_path / "search" / "candidates" / "c0001" / "traces" / "w-fake.jsonl")) == 4


def test_a_race_rejects_a_challenger_that_only_ties_the_incumbent(tmp_path, runner, add_domain):
    archive = Archive(tmp_path / "search")
    good = HarnessCandidate("c0000", add_domain.seed_harness(), None, "seed", "seed")
    archive.add(good, status="seed")
    inc_eval, _ = evaluate_candidate(runner, archive, good, add_domain.tasks, 1)
    settings = SearchSettings(1, 1, 1, "", acceptance=Race())
    result = harness_step(
        runner, archive, ListProposer([add_domain.seed_harness() + "\n\nUNUSED = 1\n"]), good, inc_eval,
        add_domain.tasks, settings, 0,
    )  # fmt: skip
    assert not result.accepted and result.incumbent.id == "c0000"
    assert archive.meta("c0001")["status"] == "rejected" and result.reason.startswith("no challenger passed")
    assert result.decision_rollouts == len(add_domain.tasks)  # tied on every task: never ahead, not extended
