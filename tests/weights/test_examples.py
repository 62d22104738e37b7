"""Which calls of a rollout are trained on: the samples that gave the returned answer and the last
attempt of a retry, on the math seed harness with N_VOTES=3 and RETRIES=1 run in the sandbox, and on
traces built by hand for what the sandbox run does not show."""

from __future__ import annotations

from whale.core.config import DomainConfig
from whale.domains.registry import build_domain
from whale.harness.calls import RolloutJob, RunnerLimits
from whale.harness.records import HarnessCandidate, ModelCall, Rollout, ToolCall
from whale.harness.runner import RolloutRunner
from whale.model.engine import Generation, GenerationRequest, SamplingParams
from whale.weights.examples import trainable


class ScriptedEngine:
    """Replies from a script, in request order (one rollout at a time, so the order is the harness's)."""

    weights_version = "w-script"

    def __init__(self, replies: list[str]):
        self.replies = list(replies)

    def generate(self, requests: list[GenerationRequest], seed: int) -> list[Generation]:
        return [Generation(self.replies.pop(0), [1, 2], [3, 4], "stop") for _ in requests]


def test_votes_and_a_retry_train_only_on_the_samples_behind_the_answer():
    domain = build_domain(DomainConfig(name="math", sizes={"train": 1, "search": 1, "val": 1, "test": 1}))
    source = domain.seed_harness().replace("N_VOTES = 1", "N_VOTES = 3").replace("RETRIES = 0", "RETRIES = 1")
    replies = ["no idea", "hmm", "not sure", "The answer is 12.", "12", "7"]  # 3 unusable, then 12, 12, 7
    runner = RolloutRunner(
        ScriptedEngine(replies), domain, SamplingParams(max_tokens=8), RunnerLimits(workers=1)
    )
    try:
        task = domain.splits()["train"][0]
        (rollout,) = runner.run([RolloutJob(task, HarnessCandidate("h", source), 0)])
    finally:
        runner.close()
    assert rollout.error is None and rollout.answer == "12" and len(rollout.calls) == 6
    assert [c.text for c in trainable(rollout)] == ["The answer is 12.", "12"]


def call(messages: list[dict[str, str]], text: str, train: bool = True) -> ModelCall:
    return ModelCall(messages, [1], [2], text, "stop", train, {})


def test_an_agent_step_that_ran_a_tool_is_kept_and_a_retry_after_a_refused_tool_is_not():
    ask = [{"role": "user", "content": "Who wrote it?"}]
    search = call(ask, "search: author")
    answer = call(
        [*ask, {"role": "assistant", "content": "search: author"}, {"role": "user", "content": "hits"}], "Ann"
    )
    ran = Rollout("t", "h", "w", 0, answer="Ann", calls=[search, answer])
    ran.tool_calls = [ToolCall("search", ["author"], {}, result="hits", after_calls=1)]
    assert trainable(ran) == [search, answer]  # the tool ran on the first reply: an agent step
    refused = Rollout("t", "h", "w", 0, answer="Ann", calls=[search, answer])
    refused.tool_calls = [ToolCall("search", ["author"], {}, error="bad query", after_calls=1)]
    assert trainable(refused) == [answer]  # re-asked after the tool refused it: a failed attempt
    unknown = Rollout("t", "h", "w", 0, answer="Ann", calls=[search, answer])
    unknown.tool_calls = [ToolCall("search", ["author"], {}, result="hits")]  # a trace from before the order
    assert trainable(unknown) == [search, answer]


def test_samples_that_do_not_say_the_answer_and_opted_out_calls_are_not_trained_on():
    ask = [{"role": "user", "content": "Which operation?"}]
    split = Rollout(
        "t", "h", "w", 0, answer="7", calls=[call(ask, "add"), call(ask, "times"), call(ask, "minus")]
    )
    assert trainable(split) == []  # none says the answer
    # operands:calculator in the second edition (math whale-adaptive seed 0, step 4): the calculator made
    # the answer from the usable votes, each worded its own way; the two identical replies were the
    # degenerate ones, and crediting the most common reply trained the model to give them
    votes = ["Ava ends up with ", "Addition: addition", "You guessed it - multiplication.", "Add"]
    votes.append("Ava ends up with ")
    degenerate = Rollout("t", "h", "w", 0, answer="46", calls=[call(ask, v) for v in votes])
    assert trainable(degenerate) == []
    said = [call(ask, "add"), call(ask, "Add."), call(ask, "46")]
    named = Rollout("t", "h", "w", 0, answer="46", calls=said)
    assert [c.text for c in trainable(named)] == ["46"]
    out = Rollout("t", "h", "w", 0, answer="x", calls=[call(ask, "x", train=False), call([], "x")])
    assert [c.messages for c in trainable(out)] == [[]]


def test_what_the_harness_says_wins_over_the_trace():
    ask = [{"role": "user", "content": "Which operation?"}]
    votes = [call(ask, "add"), call(ask, "Addition."), call(ask, "minus")]
    votes[0].credit = votes[1].credit = True
    said = Rollout("t", "h", "w", 0, answer="7", calls=votes)
    assert [c.text for c in trainable(said)] == ["add", "Addition."]  # no vote says 7, the harness said which
    answer = call([{"role": "user", "content": "Say it"}], "7")
    answer.credit = False
    quiet = Rollout("t", "h", "w", 0, answer="7", calls=[answer, call([], "7", train=False)])
    quiet.calls[1].credit = True
    assert trainable(quiet) == [quiet.calls[1]]  # a later say-so over train=False, and over the trace
    empty = call(ask, "add")
    empty.completion_ids, empty.credit = [], True
    assert trainable(Rollout("t", "h", "w", 0, answer="7", calls=[empty])) == []  # nothing to train on


def test_operands_credits_the_votes_that_named_the_operation_it_used():
    """math's seed under operands:calculator in the sandbox: of five votes the three naming multiply are
    credited, however worded; the degenerate and the dissenting ones are not."""
    from whale.search.mechanisms import Context, apply
    from whale.search.toolspec import tool_specs

    domain = build_domain(DomainConfig(name="math", sizes={"train": 1, "search": 1, "val": 1, "test": 1}))
    task = domain.splits()["train"][0]  # "Zoe has 6 boxes with 9 apples in each box. ..." (6 * 9 = 54)
    ctx = Context(task.inputs, 1.0, [], tool_specs(domain.toolbox(task), domain.brief))
    source = apply("operands:calculator", domain.seed_harness(), ctx)
    replies = ["Multiply.", "Zoe ends up with ", "You guessed it - multiplication.", "add", "times"]
    limits = RunnerLimits(workers=1)
    runner = RolloutRunner(ScriptedEngine(replies), domain, SamplingParams(max_tokens=8), limits)
    try:
        (rollout,) = runner.run([RolloutJob(task, HarnessCandidate("h", source), 0)])
    finally:
        runner.close()
    assert rollout.error is None and rollout.answer == "54" and rollout.reward == 1.0
    assert [c.credit for c in rollout.calls] == [True, False, True, False, True]
    assert [c.text for c in trainable(rollout)] == ["Multiply.", "You guessed it - multiplication.", "times"]


def test_votes_over_runs_of_two_calls_each_take_the_losing_runs_out():
    from whale.search.mechanisms import Context, votes

    domain = build_domain(DomainConfig(name="math", sizes={"train": 1, "search": 1, "val": 1, "test": 1}))
    task = domain.splits()["train"][0]
    two_calls = (
        "def run(task, llm, tools):\n"
        "    note = llm.chat([{'role': 'user', 'content': 'think: ' + task['question']}])\n"
        "    return llm.chat([{'role': 'user', 'content': 'answer, given: ' + note}])\n"
    )
    source = votes(two_calls, Context(task.inputs, 2.0, []))
    replies = ["a", "54", "b", "7", "c", "54", "d", "54 ", "e", "9"]  # five runs: 54 three times
    limits = RunnerLimits(workers=1)
    runner = RolloutRunner(ScriptedEngine(replies), domain, SamplingParams(max_tokens=8), limits)
    try:
        (rollout,) = runner.run([RolloutJob(task, HarnessCandidate("h", source), 0)])
    finally:
        runner.close()
    assert rollout.error is None and rollout.answer == "54" and len(rollout.calls) == 10
    lost = [False, False]
    assert [c.credit for c in rollout.calls] == [None, None, *lost, None, None, None, None, *lost]
    assert [c.text for c in trainable(rollout)] == ["a", "54", "c", "54", "d", "54 "]
