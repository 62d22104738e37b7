"""Failures by kind, from hand-made rollouts and from a real evaluation in the archive."""

from __future__ import annotations

from whale.harness.calls import RunnerLimits
from whale.harness.records import HarnessCandidate, ModelCall, Rollout, ToolCall
from whale.harness.runner import RolloutRunner
from whale.model.engine import SamplingParams
from whale.search.archive import Archive
from whale.search.diagnosis import candidate_set, describe, diagnose, failure_kind
from whale.search.llm_prompt import score_summary
from whale.search.scoring import evaluate_candidate


def call(text: str) -> ModelCall:
    return ModelCall([{"role": "user", "content": "q"}], [1], [2], text, "stop", True, {})


def rollout(answer: str | None = "7", reward: float = 0.0, error: str | None = None, **parts) -> Rollout:
    return Rollout("t", "h", "w", 0, answer=answer, reward=reward, error=error, **parts)


def test_each_kind_of_failure_is_named_in_order():
    options = {"choices": ["Paris", "Rome", "Oslo"]}
    assert failure_kind(rollout("7", reward=1.0)) is None
    assert failure_kind(rollout(error="crash: ValueError: x")) == "crash"
    assert failure_kind(rollout(error="forbidden: open")) == "crash"
    assert failure_kind(rollout(error="timeout: rollout ran over 600s")) == "timeout"
    refused = ToolCall("calculator", ["1/0"], {}, error="division by zero")
    assert failure_kind(rollout(tool_calls=[refused], calls=[call("x")])) == "tool error"
    assert failure_kind(rollout(calls=[call(""), call("  ")])) == "empty reply"
    assert failure_kind(rollout(answer="  ", calls=[call("I think")])) == "no answer"
    assert failure_kind(rollout(answer=None)) == "no answer"
    assert failure_kind(rollout("the capital is Paris", calls=[call("x")]), options) == "outside candidates"
    assert failure_kind(rollout(" rome. ", calls=[call("x")]), options) == "wrong value"
    assert failure_kind(rollout("8", calls=[call("8")])) == "wrong value"


def test_a_candidate_set_is_a_short_list_of_strings_in_the_inputs():
    assert candidate_set({"question": "q", "options": ["A", "b "]}) == {"a", "b"}
    assert candidate_set({"question": "q", "numbers": [1, 2]}) is None
    assert candidate_set({"question": "q", "one": ["only"]}) is None
    assert candidate_set({"passages": [str(i) for i in range(100)]}) is None
    assert candidate_set(None) is None


def test_diagnose_counts_failures_most_frequent_first():
    rollouts = [rollout(answer=None)] * 3 + [rollout("8")] * 5 + [rollout("7", reward=1.0)] * 2
    failures = diagnose(rollouts)
    assert failures == {"wrong value": 5, "no answer": 3} and list(failures) == ["wrong value", "no answer"]
    assert describe(failures, 10) == "failures over 10 rollouts: wrong value 5, no answer 3"
    assert describe({}, 4) == "failures over 4 rollouts: none"


def test_an_evaluation_stores_its_failures_and_the_llm_proposer_reads_them(tmp_path, fake_engine, add_domain):
    wrong = (
        'def run(task, llm, tools):\n    llm.chat([{"role": "user", "content": "guess"}])\n    return "0"\n'
    )
    archive = Archive(tmp_path / "search")
    candidate = HarnessCandidate("c0000", wrong, None, "seed", "seed")
    archive.add(candidate, status="seed")
    runner = RolloutRunner(fake_engine, add_domain, SamplingParams(max_tokens=4), RunnerLimits(workers=4))
    try:
        ev, _ = evaluate_candidate(runner, archive, candidate, add_domain.tasks, 2)
    finally:
        runner.close()
    n = 2 * len(add_domain.tasks)
    assert ev.rollouts == n and ev.failures == {"wrong value": n}
    assert archive.eval_history("c0000")[-1].failures == {"wrong value": n}
    assert f"failures over {n} rollouts: wrong value {n}" in score_summary(
        archive, "c0000", ev.weights_version
    )
