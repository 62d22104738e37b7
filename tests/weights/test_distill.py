"""Distill targets (whale/weights/distill.py): which targets are tried and in what order, the replays that
confirm them through real sandbox workers (the engine is never asked), the skips by reason, and a real
weight step on the tiny model whose rescuer's answer comes from a tool, so no reply holds it."""

from __future__ import annotations

import copy
import io
import random
from collections import Counter
from functools import partial

import pytest
from conftest import AddDomain
from rich.console import Console

from whale.core.progress import track
from whale.harness.records import HarnessCandidate, ModelCall, Rollout
from whale.harness.runner import RolloutRunner
from whale.model.engine import SamplingParams
from whale.model.hf_engine import HFEngine
from whale.model.losses import Objective
from whale.model.sampling import reply_encoder
from whale.model.trainer import Trainer, TrainerConfig
from whale.weights.distill import answering_call, distill, targets
from whale.weights.rescue import RescueSettings
from whale.weights.weight_step import WeightSettings, weight_step

BARS = partial(track, Console(file=io.StringIO()))

# The incumbent: reads "Answer: N" from the reply, else returns the reply as it is.
PARSER = """
import re

def run(task, llm, tools):
    reply = llm.chat([{"role": "user", "content": f"add {task['a']} and {task['b']}"}], max_tokens=8)
    found = re.findall(r"Answer: (\\d+)", reply)
    return found[-1] if found else reply
"""
MARKED = PARSER.replace("return found[-1] if found else reply", "return reply + ' #'")  # never passes
ADDER = """
def run(task, llm, tools):
    llm.chat([{"role": "user", "content": "which tool adds?"}], max_tokens=8)
    return str(tools.add(task["a"], task["b"]))
"""
ASK = [{"role": "user", "content": "add 1 and 13"}]  # task add-1, whose gold answer is "14"
# Two calls: a plan, then the answer on a conversation that holds the plan.
PLANNER = """
import re

def run(task, llm, tools):
    ask = [{"role": "user", "content": f"add {task['a']} and {task['b']}"}]
    plan = llm.chat(ask, max_tokens=8)
    if plan != "a plan":
        return "lost"
    again = [*ask, {"role": "assistant", "content": plan}, {"role": "user", "content": "so?"}]
    reply = llm.chat(again, max_tokens=8)
    found = re.findall(r"Answer: (\\d+)", reply)
    return found[-1] if found else reply
"""
AGAIN = [*ASK, {"role": "assistant", "content": "a plan"}, {"role": "user", "content": "so?"}]


def call(text: str, messages=ASK, prompt=(1, 2, 3), max_tokens=16, train=True) -> ModelCall:
    return ModelCall(messages, list(prompt), [9, 9], text, "eos", train, {"max_tokens": max_tokens})


def incumbent(text: str, answer: str | None, **kw) -> Rollout:
    return Rollout("add-1", "c0", "w0", 0, answer=answer, calls=[call(text, **kw)])


def planned(text: str, answer: str, plan: str = "a plan") -> Rollout:
    """The planner's rollout as recorded: its plan, then its answering call on the conversation holding it."""
    again = [*ASK, {"role": "assistant", "content": plan}, {"role": "user", "content": "so?"}]
    calls = [call(plan, prompt=(1, 2)), call(text, messages=again, prompt=(1, 2, 8, 3))]
    return Rollout("add-1", "c0", "w0", 0, answer=answer, calls=calls)


def rescued(reply: str, answer: str = "14", sample: int = 0) -> Rollout:
    other = [{"role": "user", "content": "use the tool"}]
    rescue_call = ModelCall(other, [5], [4, 14, 2], reply, "eos", True, {"max_tokens": 8})
    return Rollout("add-1", "c1", "w0", sample, answer=answer, reward=1.0, calls=[rescue_call])


@pytest.fixture
def replaying(fake_engine, tokenizer):
    """distill() over a real runner for AddDomain; the engine records any batch it is asked for."""
    domain = AddDomain()
    runner = RolloutRunner(fake_engine, domain, SamplingParams(max_tokens=8), seed=1)
    tasks = {t.id: t for t in domain.tasks}

    def run(source, mine, rescue, max_per_task=4):
        harnesses = {"c0": HarnessCandidate("c0", source)}
        return distill(runner, mine, rescue, harnesses, tasks, 1.0, max_per_task, reply_encoder(tokenizer))

    yield run
    runner.close()
    assert fake_engine.batch_sizes == []  # replays never sample


def test_targets_come_in_order_of_preference_without_repeats():
    mine = incumbent("Answer: 7", "7")
    assert targets(mine, mine.calls[0], rescued("it is 14")) == [
        ("reply", "it is 14"), ("answer in place", "Answer: 14"), ("answer", "14"),
    ]  # fmt: skip
    said_nothing = incumbent("no idea", "no idea")  # its answer was the whole reply: in place is the answer
    assert targets(said_nothing, said_nothing.calls[0], rescued("14")) == [("reply", "14")]
    silent = incumbent("hmm", None)
    assert targets(silent, silent.calls[0], rescued("")) == [("answer", "14")]


def test_a_replay_keeps_the_first_target_under_which_the_incumbent_passes(replaying, tokenizer):
    out = replaying(PARSER, [incumbent("Answer: 7", "7")], [rescued("it is 14")])
    assert out.replays == 3 and out.targets == Counter({"answer in place": 1}) and not out.skipped
    [(source, example)] = out.pairs
    target = reply_encoder(tokenizer)("Answer: 14")
    assert example.ids == [1, 2, 3, *target] and example.mask == [0, 0, 0] + [1] * len(target)
    assert target[-1] == tokenizer.eos_token_id and source.sample == 0
    out = replaying(PARSER, [incumbent("Answer: 7", "7")], [rescued("Answer: 14")])
    assert out.targets == Counter({"reply": 1})
    assert out.pairs[0][1].ids == [1, 2, 3, 4, 14, 2]  # the reply's own sampled ids


def test_distill_skips_what_no_target_or_call_allows_and_says_why(replaying):
    out = replaying(MARKED, [incumbent("Answer: 7", "7 #")], [rescued("it is 14")])
    assert out.pairs == [] and out.skipped == Counter({"no target": 1}) and out.replays == 2
    short = incumbent("Answer: 7", "7", max_tokens=1)
    out = replaying(PARSER, [short], [rescued("it is 14")])
    assert out.skipped == Counter({"too long": 1})
    untrained = incumbent("Answer: 7", "7", train=False)
    out = replaying(PARSER, [untrained, incumbent("Answer: 7", "7")], [rescued("it is 14")])
    assert out.skipped == Counter({"no call": 1}) and out.replays == 0  # the task's first rollout counts
    votes = Rollout("add-1", "c0", "w0", 0, calls=[call("5"), call("6", prompt=(1, 2))])
    assert answering_call(votes).text == "6"  # the n samples of one request are one conversation


def test_a_harness_of_several_calls_is_distilled_at_its_last_call_when_the_replay_confirms_it(replaying):
    """Plan, then answer on a conversation that holds the plan: the replay gives the plan back as it was
    and the target at the answering prompt, and the incumbent's code then passes."""
    out = replaying(PLANNER, [planned("Answer: 7", "7")], [rescued("it is 14")])
    assert out.targets == Counter({"answer in place": 1}) and out.replays == 3
    (_, example), answering = out.pairs[0], planned("Answer: 7", "7").calls[-1]
    assert example.ids[: len(answering.prompt_ids)] == answering.prompt_ids  # the prompt that holds the plan
    assert answering_call(planned("Answer: 7", "7")).messages == AGAIN
    out = replaying(PLANNER, [planned("Answer: 7", "7", plan="another plan")], [rescued("it is 14")])
    assert out.pairs == [] and out.skipped == Counter({"no target": 1})  # off the recorded path: no target


def test_distill_keeps_at_most_a_few_per_task_and_never_a_failed_rescue(replaying):
    failed = rescued("it is 14", sample=9)
    failed.reward = 0.0
    rescue = [rescued("it is 14", sample=s) for s in range(3)] + [failed]
    out = replaying(PARSER, [incumbent("Answer: 7", "7")], rescue, max_per_task=2)
    assert [r.sample for r, _ in out.pairs] == [0, 1] and out.replays == 3  # one replay per distinct target


def test_a_weight_step_distills_an_answer_that_only_a_tool_computed(tiny):
    """The rescuer's answer comes from tools.add, so it is in no reply; under the old rule distill kept
    nothing here. The replay finds that the incumbent returns its reply as it is, so the answer in place
    of that reply passes, and the step trains on the incumbent's prompt."""
    model, tokenizer = copy.deepcopy(tiny[0]), tiny[1]
    domain = AddDomain()
    trainer = Trainer(model, tokenizer.eos_token_id, TrainerConfig(lora=True, lora_r=4, lr=1e-3), seed=0)
    runner = RolloutRunner(HFEngine(model, tokenizer), domain, SamplingParams(max_tokens=8), seed=1)
    seed, adder = HarnessCandidate("c0", PARSER), HarnessCandidate("c1", ADDER)
    settings = WeightSettings(
        "rft", 3, 2, 1.0, 1, False, True, Objective("sft"), RescueSettings("distill", harnesses=1, k=2),
        reply_encoder(tokenizer),
    )  # fmt: skip
    try:
        result = weight_step(
            runner, trainer, [seed], domain.tasks, settings, random.Random(0), "s", BARS, "step",
            lambda failed: [adder], budget=100,
        )  # fmt: skip
    finally:
        runner.close()
    report = result.rescue
    assert result.train_reward == 0.0 and (report.zero_signal, report.rescued) == (3, 3)
    assert report.targets == {"answer in place": 3} and report.examples == 3 and not report.skipped
    assert report.replays >= 3 and len(result.rollouts) == 3 * 2 + 3 * 2  # replays are not rollouts
    assert result.by_harness == {"c0": 3} and result.optimizer_steps > 0
    trained = [r for r in result.rollouts if r.rescue and r.rescue["trained"]]
    assert len(trained) == 3 and {r.harness_id for r in trained} == {"c1"}
