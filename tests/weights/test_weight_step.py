"""Turning a weight step's rollouts into training examples for RFT, DPO and GRPO; the runner recording
sampling log-probs only for rollouts that ask."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from whale.harness.records import HarnessCandidate, ModelCall, Rollout
from whale.harness.runner import RolloutRunner
from whale.model.engine import SamplingParams
from whale.model.hf_engine import HFEngine
from whale.model.losses import Objective
from whale.weights.examples import drop_uniform
from whale.weights.grpo import group_advantages
from whale.weights.weight_step import WeightSettings, build_batch, sample


def call(
    prompt: list[int], completion: list[int], train: bool = True, temperature: float = 1.0, step: int = 0
) -> ModelCall:
    logprobs = [-0.5 - 0.1 * i for i in range(len(completion))]
    messages = [{"role": "user", "content": f"step {step}"}]  # a harness's steps, not samples of one request
    params = {"temperature": temperature}
    return ModelCall(messages, prompt, completion, "", "length", train, params, logprobs)


def rollout(task: str, sample: int, reward: float, harness: str = "c0", calls: int = 1, **kw) -> Rollout:
    made = [call([1, 2, 3], [10 + sample, 20 + i], step=i) for i in range(calls)]
    return Rollout(task, harness, "w0", sample, reward=reward, calls=made, **kw)


def test_group_advantages_by_hand():
    assert group_advantages([1.0, 0.0, 1.0, 0.0]) == [1.0, -1.0, 1.0, -1.0]  # mean 0.5, std 0.5
    assert group_advantages([1.0, 0.0, 0.0, 0.0], std_normalize=False) == [0.75, -0.25, -0.25, -0.25]
    assert group_advantages([1.0, 0.0, 0.0, 0.0]) == pytest.approx(
        [3**0.5, -(3**-0.5), -(3**-0.5), -(3**-0.5)]
    )
    assert group_advantages([1.0, 1.0]) == [0.0, 0.0] and group_advantages([0.3]) == [0.0]


def test_rft_keeps_passing_rollouts_and_counts_examples_per_harness():
    rollouts = [rollout("a", 0, 1.0, calls=2), rollout("a", 1, 0.0), rollout("b", 0, 1.0, harness="c1"),
                rollout("b", 1, 1.0, harness="c1", error="crash: x")]  # fmt: skip
    rollouts[0].calls.append(call([1], [5], train=False))  # train=False calls never become examples
    batch = build_batch(rollouts, "rft", threshold=1.0, max_per_task=8)
    assert batch.kept == 2 and len(batch.examples) == 3
    assert batch.by_harness == {"c0": 2, "c1": 1}
    assert batch.mean_abs_advantage is None
    assert all(e.pair == -1 and e.temperature == 1.0 and e.old_logprobs is None for e in batch.examples)
    assert batch.examples[0].ids == [1, 2, 3, 10, 20] and batch.examples[0].mask == [0, 0, 0, 1, 1]


def test_dpo_pairs_a_passing_and_a_failing_rollout_of_one_task_under_one_harness():
    rollouts = [
        rollout("a", 0, 1.0), rollout("a", 1, 0.0, calls=2), rollout("a", 2, 1.0), rollout("a", 3, 0.0),
        rollout("a", 4, 1.0),  # a third passing sample has no failing partner left
        rollout("b", 0, 1.0, harness="c0"), rollout("b", 1, 0.0, harness="c1"),  # two harnesses: no pair
        rollout("c", 0, 0.0), rollout("c", 1, 0.0),  # all fail: no pair
        rollout("d", 0, 1.0), rollout("d", 1, 0.0, error="timeout: x"),  # an error is a failure
    ]  # fmt: skip
    batch = build_batch(rollouts, "dpo", threshold=1.0, max_per_task=8)
    pairs: dict[int, list] = {}
    for e in batch.examples:
        pairs.setdefault(e.pair, []).append(e)
    assert len(pairs) == 3 and batch.kept == 6
    first = pairs[min(pairs)]  # task a: sample 0 (chosen, one call) against sample 1 (rejected, two calls)
    assert [(e.chosen, e.ids[3]) for e in first] == [(True, 10), (False, 11), (False, 11)]
    assert all(any(e.chosen for e in p) and any(not e.chosen for e in p) for p in pairs.values())
    assert batch.by_harness == {"c0": len(batch.examples)}
    assert len({e.pair for e in build_batch(rollouts, "dpo", 1.0, max_per_task=1).examples}) == 2


def test_grpo_gives_every_call_of_a_rollout_its_group_relative_advantage():
    rollouts = [
        rollout("a", 0, 1.0, calls=2),
        rollout("a", 1, 0.0),
        rollout("a", 2, 0.0),
        rollout("a", 3, 1.0),
    ]
    rollouts += [rollout("b", 0, 0.5, harness="c1"), rollout("b", 1, 0.5, harness="c1")]
    rollouts[1].calls[0] = call([1, 2], [7, 8, 9], temperature=0.7)
    batch = build_batch(rollouts, "grpo", threshold=1.0, max_per_task=1)
    assert batch.kept == 6 and len(batch.examples) == 7  # max_per_task does not cap GRPO groups
    assert [e.advantage for e in batch.examples] == [1.0, 1.0, -1.0, -1.0, 1.0, 0.0, 0.0]
    assert batch.mean_abs_advantage == pytest.approx(4 / 6)
    e = batch.examples[2]
    assert e.temperature == 0.7 and e.old_logprobs == pytest.approx([-0.5, -0.6, -0.7])
    centred = build_batch(rollouts, "grpo", 1.0, 8, std_normalize=False)
    assert [e.advantage for e in centred.examples][:3] == [0.5, 0.5, -0.5]


def test_grpo_refuses_calls_without_sampling_logprobs():
    rollouts = [rollout("a", 0, 1.0), rollout("a", 1, 0.0)]
    rollouts[1].calls[0].logprobs = None
    with pytest.raises(ValueError, match="without sampling log-probs"):
        build_batch(rollouts, "grpo", 1.0, 8)


def test_dropping_groups_that_all_pass_or_all_fail():
    rollouts = [rollout("mixed", 0, 1.0), rollout("mixed", 1, 0.0), rollout("easy", 0, 1.0),
                rollout("easy", 1, 1.0), rollout("hard", 0, 0.0), rollout("hard", 1, 0.0)]  # fmt: skip
    kept, dropped = drop_uniform(rollouts, threshold=1.0)
    assert [r.task_id for r in kept] == ["mixed", "mixed"] and dropped == 2
    assert build_batch(rollouts, "rft", 1.0, 8).kept == 3
    rft = build_batch(rollouts, "rft", 1.0, 8, drop_uniform_groups=True)
    assert rft.kept == 1 and rft.dropped_tasks == 2
    grpo = build_batch(rollouts, "grpo", 1.0, 8, drop_uniform_groups=True)
    assert grpo.kept == 2 and grpo.mean_abs_advantage == 1.0
    with pytest.raises(ValueError, match="unknown weight algorithm"):
        build_batch(rollouts, "ppo", 1.0, 8)


def test_logprobs_are_left_out_of_the_json_unless_recorded():
    r = rollout("a", 0, 1.0)
    with_lp = r.to_json()
    assert with_lp["calls"][0]["logprobs"] == pytest.approx([-0.5, -0.6])
    r.calls[0].logprobs = None
    plain = r.to_json()
    assert "logprobs" not in plain["calls"][0]
    assert Rollout.from_json(json.loads(json.dumps(plain))).calls[0].logprobs is None
    assert Rollout.from_json(with_lp).calls[0].logprobs == pytest.approx([-0.5, -0.6])


def test_the_runner_records_sampling_logprobs_only_for_jobs_that_ask(tiny, add_domain):
    model, tokenizer = tiny
    runner = RolloutRunner(HFEngine(model, tokenizer), add_domain, SamplingParams(max_tokens=4), seed=1)
    seed = HarnessCandidate("c0", add_domain.seed_harness())
    try:
        grpo = WeightSettings("grpo", 2, 2, 1.0, 8, False, True, Objective("grpo"))
        asked, _ = sample(runner, [seed], add_domain.tasks, random.Random(0), grpo, "s")
        plain, _ = sample(
            runner, [seed], add_domain.tasks, random.Random(0), replace(grpo, algorithm="rft"), "s"
        )
    finally:
        runner.close()
    for r in asked:
        c = r.calls[0]
        assert c.logprobs is not None and len(c.logprobs) == len(c.completion_ids) > 0
        assert all(lp <= 0.0 for lp in c.logprobs)
    assert all(
        c.logprobs is None and "logprobs" not in r.to_json()["calls"][0] for r in plain for c in r.calls
    )
    # the same per-call seeds: the same tokens, whether or not log-probs were recorded
    assert [r.calls[0].completion_ids for r in asked] == [r.calls[0].completion_ids for r in plain]
