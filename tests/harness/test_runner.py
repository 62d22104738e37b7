"""RolloutRunner with real sandbox worker processes, a test domain and a recording test engine."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest
from conftest import AddDomain, AddToolbox

from tests.processes import group_alive
from whale.core import timing
from whale.harness.calls import RolloutJob, RunnerLimits, apply_credit, conversation_key
from whale.harness.records import HarnessCandidate, ModelCall, Rollout
from whale.harness.runner import RolloutRunner
from whale.harness.task import Task
from whale.model.engine import SamplingParams
from whale.model.fast_engine import FastEngine
from whale.model.hf_engine import HFEngine

SAMPLING = SamplingParams(temperature=0.7, max_tokens=4)


def harness(source: str, hid: str = "h") -> HarnessCandidate:
    return HarnessCandidate(hid, source)


def body(*lines: str) -> str:
    return "def run(task, llm, tools):\n" + "".join(f"    {line}\n" for line in lines)


@pytest.fixture
def make_runner(fake_engine, add_domain):
    """Runners whose spawned worker processes are recorded (to check that killed ones are gone)."""
    made = []

    def make(**limits):
        runner = RolloutRunner(fake_engine, add_domain, SAMPLING, RunnerLimits(**limits), seed=3)
        runner.spawned = []
        spawn = runner._spawn

        def recording_spawn():
            w = spawn()
            runner.spawned.append(w.proc)
            return w

        runner._spawn = recording_spawn
        made.append(runner)
        return runner

    yield make
    for runner in made:
        runner.close()


def test_good_harness_is_rewarded_by_the_parent_side_verifier(make_runner, add_domain, fake_engine):
    runner = make_runner(workers=2)
    tasks = add_domain.tasks[:4]
    done = []
    rollouts = runner.run(
        [RolloutJob(t, harness(add_domain.seed_harness(), "good"), s) for t in tasks for s in range(2)],
        on_done=done.append,
    )
    assert [(r.task_id, r.sample) for r in rollouts] == [(t.id, s) for t in tasks for s in range(2)]
    assert sorted(id(r) for r in done) == sorted(id(r) for r in rollouts)
    for r, t in zip(rollouts[::2], tasks, strict=True):
        assert r.error is None
        assert r.answer == t.gold["answer"] and r.reward == 1.0
        assert r.harness_id == "good" and r.weights_version == "w-fake"
        (call,) = r.calls
        assert call.messages == [{"role": "user", "content": f"add {t.inputs['a']} and {t.inputs['b']}"}]
        assert call.text == "echo: " + call.messages[0]["content"]
        assert call.prompt_ids == [1, 7, 7] and call.completion_ids == [1, 2, 3, 4]
        assert call.train is True
        seed = call.params.pop("seed")
        assert isinstance(seed, int) and 0 <= seed < 2**63  # the per-call sampling seed
        assert call.params == {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "max_tokens": 4, "stop": []}
        (tool,) = r.tool_calls
        assert (tool.name, tool.args, tool.result, tool.error) == ("add", [t.inputs["a"], t.inputs["b"]],
                                                                  int(t.gold["answer"]), None)  # fmt: skip
        assert r.generated_tokens == 4
    assert len(runner.spawned) == 2  # 8 jobs on 2 workers: workers are reused
    assert runner.engine_calls == len(fake_engine.batch_sizes)


def test_a_worker_never_runs_a_second_candidate(make_runner, add_domain):
    """Workers are reused within one candidate only: one that got past the Python layers could leave an
    implant (a rewritten Channel.send) for the rollouts of the next candidate."""
    runner = make_runner(workers=2)
    served: dict[int, list[str]] = {}  # worker pid -> the candidates it was handed
    take = runner._take_worker

    def recording_take(owner):
        w = take(owner)
        served.setdefault(w.proc.pid, []).append(owner)
        return w

    runner._take_worker = recording_take
    seed = add_domain.seed_harness()
    twin = harness(seed + "\nY = 1\n", "a")  # the same id with other code is another candidate
    jobs = [RolloutJob(t, h, s) for h in (harness(seed, "a"), harness(seed + "\nX = 1\n", "b"), twin)
            for t in add_domain.tasks[:4] for s in range(2)]  # fmt: skip
    assert all(r.reward == 1.0 for r in runner.run(jobs))
    assert all(len(set(owners)) == 1 for owners in served.values()), served
    assert len({owners[0] for owners in served.values()}) == 3
    assert any(len(owners) > 1 for owners in served.values())  # reused within a candidate
    assert len(runner.idle) <= 2  # no more idle workers kept than the pool's size


def test_a_larger_idle_pool_keeps_each_candidates_workers_for_its_next_turn(make_runner, add_domain):
    """Three candidates take turns, as a run's train, val and test do: with the pool as large as the
    workers, each turn evicts the workers the next one needs; with `idle_workers` three times that, the
    second round starts none."""
    seed = add_domain.seed_harness()
    candidates = [harness(seed + f"\nX = {i}\n", f"c{i}") for i in range(3)]

    def two_rounds(runner) -> list[int]:
        started = []
        for _ in range(2):
            before = len(runner.spawned)
            for h in candidates:
                runner.run([RolloutJob(t, h, s) for t in add_domain.tasks[:2] for s in range(1)])
            started.append(len(runner.spawned) - before)
        return started

    assert two_rounds(make_runner(workers=2)) == [6, 6]
    assert two_rounds(make_runner(workers=2, idle_workers=6)) == [6, 0]


class TwoSplitDomain(AddDomain):
    """Tasks 0-1 are the search split, 2-3 the test split, 4 is in both."""

    def splits(self) -> dict[str, list[Task]]:
        return {"search": [*self.tasks[:2], self.tasks[4]], "test": self.tasks[2:5]}


def test_a_worker_never_carries_one_splits_tasks_to_another(fake_engine):
    """What a worker saw of test inputs must not reach a search-split trace, which a proposer reads: a
    candidate's workers are reused within a split, never across."""
    domain = TwoSplitDomain()
    runner = RolloutRunner(fake_engine, domain, SAMPLING, RunnerLimits(workers=1), seed=3)
    served: dict[int, list[str]] = {}  # worker pid -> the tasks it ran
    take = runner._take_worker

    def recording_take(owner):
        w = take(owner)
        served.setdefault(w.proc.pid, []).append(w.owner)
        return w

    runner._take_worker = recording_take
    seed = harness(domain.seed_harness(), "a")
    started = timing.snapshot().get(timing.OUTSIDE, {}).get("workers started", 0)
    try:
        for order in ([0, 1], [0, 1], [2, 3], [4, 4]):  # search twice, test, both
            rollouts = runner.run([RolloutJob(domain.tasks[i], seed, s) for i in order for s in range(2)])
            assert all(r.reward == 1.0 for r in rollouts)
    finally:
        runner.close()
    owners = [set(o) for o in served.values()]
    assert all(len(o) == 1 for o in owners), served  # each worker kept to one split
    assert sorted(next(iter(o)).split(":")[0] for o in owners) == ["search", "search+test", "test"]
    assert max(len(o) for o in served.values()) == 8  # and reused within it, across run() calls
    assert timing.snapshot()[timing.OUTSIDE]["workers started"] - started == len(served) == 3  # counted


class HeldToolbox(AddToolbox):
    """`add` as before, and `held`, which returns only when `release` is set (or after 20 s, saying so)."""

    names = ("add", "held")

    def __init__(self, release: threading.Event):
        self.release = release

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if name == "held":
            return "released" if self.release.wait(20.0) else "gave up"
        return super().call(name, args, kwargs)


class HeldToolDomain(AddDomain):
    def __init__(self, n: int):
        super().__init__(n)
        self.release = threading.Event()

    def toolbox(self, task: Task) -> HeldToolbox:
        return HeldToolbox(self.release)


def test_a_tool_call_in_flight_holds_up_no_other_rollout(fake_engine):
    """Tools run on the runner's tool threads: while one rollout's tool call is held, the others call the
    model and their tools and finish; the last of them releases the held call, which then completes."""
    domain = HeldToolDomain(4)
    runner = RolloutRunner(fake_engine, domain, SAMPLING, RunnerLimits(workers=4, step_timeout_s=2.0), seed=3)
    hog = harness(body("return tools.held()"), "hog")
    good = harness(domain.seed_harness(), "good")
    finished: list[str] = []

    def on_done(r: Rollout) -> None:
        finished.append(r.harness_id)
        if finished.count("good") == 3:
            domain.release.set()

    jobs = [RolloutJob(domain.tasks[0], hog, 0)] + [RolloutJob(t, good, 0) for t in domain.tasks[1:]]
    try:
        rollouts = runner.run(jobs, on_done)
    finally:
        runner.close()
    assert [(r.error, r.reward) for r in rollouts[1:]] == [(None, 1.0)] * 3
    assert rollouts[0].error is None and rollouts[0].answer == "released"
    assert finished == ["good", "good", "good", "hog"]


def test_a_tool_call_over_its_time_limit_fails_the_rollout_and_the_run_goes_on(fake_engine):
    domain = HeldToolDomain(2)
    limits = RunnerLimits(workers=2, tool_timeout_s=0.5)
    runner = RolloutRunner(fake_engine, domain, SAMPLING, limits, seed=3)
    try:
        held, good = runner.run(
            [RolloutJob(domain.tasks[0], harness(body("return tools.held()"), "hog"), 0),
             RolloutJob(domain.tasks[1], harness(domain.seed_harness(), "good"), 0)]
        )  # fmt: skip
        domain.release.set()  # the abandoned call returns now; its result is dropped
        (again,) = runner.run([RolloutJob(domain.tasks[1], harness(domain.seed_harness(), "good"), 1)])
    finally:
        runner.close()
    assert held.error == "timeout: tool held ran over 0.5s" and held.tool_calls == []
    assert (good.error, good.reward) == (None, 1.0) and (again.error, again.reward) == (None, 1.0)


def test_a_slow_worker_start_up_is_not_counted_as_the_harness_computing(make_runner, add_domain):
    runner = make_runner(workers=1, step_timeout_s=0.5, rollout_timeout_s=8.0)
    spawn = runner._spawn

    def slow_spawn():  # a loaded machine: the fresh worker gets no CPU for 1.5 s before its hello
        w = spawn()
        os.kill(w.proc.pid, signal.SIGSTOP)
        threading.Timer(1.5, os.kill, (w.proc.pid, signal.SIGCONT)).start()
        return w

    runner._spawn = slow_spawn
    task = add_domain.tasks[2]
    (good,) = runner.run([RolloutJob(task, harness(add_domain.seed_harness(), "good"), 0)])
    assert (good.error, good.reward) == (None, 1.0)
    (spin,) = runner.run([RolloutJob(task, harness(body("while True:", "    pass")), 0)])
    assert spin.error == "timeout: harness computed 0.5s without a model or tool call"  # after it is up


def test_wrong_answer_gets_zero_reward_without_error(make_runner, add_domain):
    runner = make_runner(workers=1)
    (r,) = runner.run([RolloutJob(add_domain.tasks[2], harness(body("return '999999'")), 0)])
    assert r.error is None and r.answer == "999999" and r.reward == 0.0


def test_hostile_harnesses_fail_alone_and_the_runner_keeps_going(make_runner, add_domain, tmp_path):
    target = tmp_path / "pwned.txt"
    hostile = {
        "open": body(f"open({str(target)!r}, 'w').write('x')", "return '1'"),
        "import_os": "import os\n" + body(f"os.system('touch {target}')", "return '1'"),
        "loop": body("while True:", "    pass"),
        "memory": body("x = []", "while True:", "    x.append('a' * 10**7)"),
        "random_os": "import random\n" + body("random._os.system('true')", "return '1'"),
        "json_codecs": "import json\n"
        + body(f"json.codecs.open({str(target)!r}, 'w').write('x')", "return 1"),
        "non_string": body("return ['not', 'a', 'string']"),
        "missing_tool": body("return str(tools.shell('ls'))"),
        "chat_spam": body(
            "for _ in range(50):", "    llm.chat([{'role': 'user', 'content': 'again'}])", "return '3'"
        ),  # fmt: skip
        "huge_answer": body("return 'a' * (5 << 20)"),
        "syntax": "def run(task, llm, tools)\n    return '1'\n",
        "no_run": "X = 1\n",
        "raises": body("raise ValueError('boom')"),
    }
    runner = make_runner(workers=3, step_timeout_s=3.0, memory_mb=256, max_model_calls=4)
    task = add_domain.tasks[1]
    good = harness(add_domain.seed_harness(), "good")
    jobs = [RolloutJob(task, harness(src, name), 0) for name, src in hostile.items()]
    jobs += [RolloutJob(t, good, 0) for t in add_domain.tasks[:4]]
    start = time.monotonic()
    rollouts = runner.run(jobs)
    assert time.monotonic() - start < 60  # nothing hangs: only the looping harness waits for its timeout
    by_name = dict(zip(hostile, rollouts, strict=False))
    for name, r in by_name.items():
        assert r.harness_id == name
        assert r.error, f"{name}: no error recorded"
        assert r.reward == 0.0, name
    assert not target.exists()
    assert "NameError" in by_name["open"].error
    assert "ImportError" in by_name["import_os"].error
    assert by_name["loop"].error.startswith("timeout")
    assert "MemoryError" in by_name["memory"].error
    assert "AttributeError" in by_name["random_os"].error and "_os" in by_name["random_os"].error
    assert "AttributeError" in by_name["json_codecs"].error and "codecs" in by_name["json_codecs"].error
    assert "expected str" in by_name["non_string"].error
    assert "shell" in by_name["missing_tool"].error
    assert "4 model calls" in by_name["chat_spam"].error and len(by_name["chat_spam"].calls) == 4
    assert by_name["huge_answer"].error.startswith("protocol")
    assert "SyntaxError" in by_name["syntax"].error
    assert "ValueError: boom" in by_name["raises"].error
    for r, t in zip(rollouts[len(hostile) :], add_domain.tasks[:4], strict=True):
        assert r.error is None and r.reward == 1.0 and r.answer == t.gold["answer"]
    # and the same runner still serves a later run
    (again,) = runner.run([RolloutJob(task, good, 1)])
    assert again.error is None and again.reward == 1.0


def test_gold_answer_never_reaches_the_harness(make_runner, add_domain):
    runner = make_runner(workers=2)
    snoop = body("print(repr(tools), repr(llm), sorted(task))", "return str(task)")
    tasks = add_domain.tasks[1:4]
    rollouts = runner.run([RolloutJob(t, harness(snoop), 0) for t in tasks])
    for r, t in zip(rollouts, tasks, strict=True):
        assert r.error is None
        assert r.answer == str(t.inputs)  # exactly the inputs, nothing of the gold
        assert t.gold["answer"] not in r.answer
        assert t.gold["secret"] not in r.answer + "".join(r.logs)
        assert "gold" not in r.answer + "".join(r.logs)
        assert r.reward == 0.0


def test_tool_errors_reach_the_harness_as_exceptions(make_runner, add_domain):
    runner = make_runner(workers=1)
    source = body(
        "try:",
        "    tools.add('x', 'y')",
        "except ToolError as exc:",
        "    print('refused:', exc)",
        "return str(tools.add(task['a'], task['b']))",
    )
    (r,) = runner.run([RolloutJob(add_domain.tasks[3], harness(source), 0)])
    assert r.error is None and r.reward == 1.0
    assert [t.error for t in r.tool_calls] == ["add takes integers", None]
    assert r.logs == ["refused: add takes integers\n"]


def test_timeout_kills_the_worker_process_group(make_runner, add_domain):
    runner = make_runner(workers=1, step_timeout_s=0.5)
    (r,) = runner.run([RolloutJob(add_domain.tasks[0], harness(body("while True:", "    pass")), 0)])
    assert r.error.startswith("timeout") and r.reward == 0.0
    (proc,) = runner.spawned
    assert proc.returncode is not None and proc.returncode < 0
    assert not group_alive(proc.pid)
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
    assert runner.idle == []
    assert 0.5 <= r.timings["wall_s"] < 5


def test_close_ends_idle_workers(make_runner, add_domain):
    runner = make_runner(workers=3)
    runner.run([RolloutJob(t, harness(add_domain.seed_harness()), 0) for t in add_domain.tasks[:3]])
    pids = [p.pid for p in runner.spawned]
    assert len(pids) == 3 and all(group_alive(pid) for pid in pids)
    runner.close()
    assert not any(group_alive(pid) for pid in pids)


def test_concurrent_chats_are_batched_into_one_engine_call(make_runner, add_domain, fake_engine):
    runner = make_runner(workers=8)
    source = body(
        "first = llm.chat([{'role': 'user', 'content': 'q' + str(task['a'])}])",
        "votes = llm.chat([{'role': 'user', 'content': first}], n=3)",
        "return str(tools.add(task['a'], task['b']))",
    )
    tasks = [t for t in add_domain.tasks for _ in range(2)][:8]
    rollouts = runner.run([RolloutJob(t, harness(source), 0) for t in tasks])
    assert all(r.error is None and r.reward == 1.0 for r in rollouts)
    assert fake_engine.batch_sizes == [8, 24]
    assert [len(r.calls) for r in rollouts] == [4] * 8
    for r in rollouts:
        assert r.calls[0].text == "echo: q" + r.task_id.split("-")[1]
        assert {c.messages[0]["content"] for c in r.calls[1:]} == {r.calls[0].text}
    assert len(set(fake_engine.seeds)) == 2  # each engine call gets its own seed


def test_samples_depend_on_task_sample_salt_and_call_not_on_batching_or_harness_id(tiny, add_domain):
    """Each model call is seeded from (runner seed, task, sample, salt, call index): the tiny model's
    samples come out the same whether rollouts run one at a time or batched eight wide, and harness
    candidates on the same task and sample share them (common random numbers)."""
    source = body(
        "llm.chat([{'role': 'user', 'content': 'q' + str(task['a'])}])",
        "llm.chat([{'role': 'user', 'content': 'again'}], n=2)",
        "return str(tools.add(task['a'], task['b']))",
    )
    a, b = harness(source, "a"), harness("# another candidate\n" + source, "b")

    def sampled(jobs: list[RolloutJob], workers: int, engine: type = HFEngine) -> dict:
        runner = RolloutRunner(engine(*tiny), add_domain, SAMPLING, RunnerLimits(workers=workers), seed=3)
        try:
            rollouts = runner.run(jobs)
        finally:
            runner.close()
        assert all(r.error is None and len(r.calls) == 3 for r in rollouts)
        assert runner.continuous == (engine is FastEngine)
        assert workers == 1 or runner.continuous or runner.engine_calls < 2 * len(jobs)  # batched
        return {(r.task_id, r.sample): [c.completion_ids for c in r.calls] for r in rollouts}

    keys = [(t, s) for t in add_domain.tasks for s in range(2)]
    one_by_one = sampled([RolloutJob(t, a, s) for t, s in keys], workers=1)
    batched = sampled([RolloutJob(t, a, s) for t, s in keys[::-1]], workers=8)
    other_harness = sampled([RolloutJob(t, b, s) for t, s in keys], workers=8)
    salted = sampled([RolloutJob(t, a, s, salt="step-1") for t, s in keys], workers=8)
    continuous = sampled([RolloutJob(t, a, s) for t, s in keys[::-1]], workers=8, engine=FastEngine)
    assert batched == one_by_one == continuous
    assert other_harness == one_by_one
    for key, calls in one_by_one.items():
        assert calls[1] != calls[2]  # the n=2 samples of one call differ
        assert salted[key] != calls
    distinct = {tuple(map(tuple, calls)) for calls in one_by_one.values()}
    assert len(distinct) == len(keys)  # every (task, sample) gets its own samples


def test_chat_arguments_are_checked_and_clamped(make_runner, add_domain):
    runner = make_runner(workers=2, max_tokens_cap=3)
    clamp = body(
        "llm.chat([{'role': 'user', 'content': 'hi'}], max_tokens=10**6, temperature=9.5, stop='##',",
        "         train=False)",
        "return '1'",
    )
    bad = body(
        "errors = []",
        "for kwargs in ({'n': 0}, {'max_tokens': 'many'}, {'stop': ['']}):",
        "    try:",
        "        llm.chat([{'role': 'user', 'content': 'hi'}], **kwargs)",
        "    except LLMError as exc:",
        "        errors.append(str(exc))",
        "try:",
        "    llm.chat([{'role': 'user'}])",
        "except LLMError as exc:",
        "    errors.append(str(exc))",
        "return ' | '.join(errors)",
    )
    r1, r2 = runner.run([RolloutJob(add_domain.tasks[0], harness(clamp), 0),
                         RolloutJob(add_domain.tasks[0], harness(bad), 0)])  # fmt: skip
    (call,) = r1.calls
    assert call.params["max_tokens"] == 3 and call.params["temperature"] == 2.0
    assert call.params["stop"] == ["##"] and call.train is False
    assert r2.error is None and r2.calls == []
    parts = r2.answer.split(" | ")
    assert len(parts) == 4
    assert "n must be" in parts[0] and "max_tokens" in parts[1] and "stop" in parts[2]
    assert "messages" in parts[3]


def test_a_harness_says_which_calls_produced_its_answer(make_runner, add_domain):
    """llm.credit marks the last chat's samples, or any earlier calls by index; it is recorded on the
    calls, later words win, and a malformed one reaches the harness as an LLMError."""
    source = body(
        "ask = [{'role': 'user', 'content': 'hi'}]",
        "first = llm.chat(ask)",
        "votes = llm.chat(ask, n=3)",
        "llm.credit([True, False, True])",
        "start = llm.calls_made()",
        "llm.chat(ask, n=2)",
        "llm.credit(False, calls=range(start, llm.calls_made()))",
        "llm.credit(True, calls=[0])",
        "llm.credit(False)",
        "errors = []",
        "for keep, calls in (([True], None), ('yes', None), (True, [9]), (True, [-1]), (True, [range(1)])):",
        "    try:",
        "        llm.credit(keep, calls=calls)",
        "    except LLMError as exc:",
        "        errors.append(str(exc))",
        "return str(llm.calls_made()) + ' | ' + ' | '.join(errors)",
    )
    runner = make_runner(workers=1)
    [r] = runner.run([RolloutJob(add_domain.tasks[0], harness(source), 0)])
    assert r.error is None
    assert [c.credit for c in r.calls] == [True, True, False, True, False, False]
    made, *errors = r.answer.split(" | ")
    assert made == "6" and len(errors) == 5
    assert all("keep must be a bool" in e and "this rollout's 6 model calls" in e for e in errors)
    said = body("return llm.chat([{'role': 'user', 'content': 'x'}])")
    [plain] = runner.run([RolloutJob(add_domain.tasks[0], harness(said), 0)])
    assert plain.calls[0].credit is None and "credit" not in plain.to_json()["calls"][0]
    assert Rollout.from_json(r.to_json()).calls[2].credit is False


def test_a_forged_credit_message_changes_nothing():
    """The runner checks what reaches it as a credit, whatever the worker's proxy let through."""
    calls = [ModelCall([], [1], [2], "a", "stop", True, {}) for _ in range(2)]
    forged = [{"calls": [0], "keep": [1]}, {"calls": [True], "keep": [True]}, {"calls": [0, 1], "keep": []}]
    forged += [{"calls": [2], "keep": [False]}, {"calls": "0", "keep": "0"}, {}]
    for msg in forged:
        assert "llm.credit" in apply_credit(msg, calls)
    assert [c.credit for c in calls] == [None, None]
    assert apply_credit({"calls": [1], "keep": [False]}, calls) is None and calls[1].credit is False


FRAME_WALK = """\
def run(task, llm, tools):
    def frames():
        yield walker.gi_frame.f_back
    walker = frames()
    frame = next(walker)
    while frame is not None and "os" not in frame.f_globals:
        frame = frame.f_back
    os = frame.f_globals["os"]
    os.close(os.open(TARGET, os.O_CREAT | os.O_WRONLY, 420))
    return "escaped"
"""


def test_generator_frame_walk_cannot_reach_the_worker_os_module(make_runner, add_domain, tmp_path):
    """A generator's frame leads to the worker module's globals (its real `os`) unless something stops it."""
    target = tmp_path / "escaped.txt"
    source = f"TARGET = {str(target)!r}\n" + FRAME_WALK
    runner = make_runner(workers=1)
    (r,) = runner.run([RolloutJob(add_domain.tasks[0], harness(source), 0)])
    assert not target.exists(), "harness code created a file through the worker's os module"
    assert r.error and r.answer != "escaped" and r.reward == 0.0


def test_continuous_batching_answers_calls_as_they_finish_and_cancels_a_dead_rollouts_call(tiny, add_domain):
    """With FastEngine the runner submits each call as it comes; short calls are answered while a long
    one still decodes, and a rollout that times out while its call is queued has that call cancelled."""

    class PacedEngine(FastEngine):
        def step(self) -> list:
            time.sleep(0.015)  # 400 steps for the long call: far past its rollout's 3 s limit
            return super().step()

    quick = body(
        "llm.chat([{'role': 'user', 'content': 'hi'}], max_tokens=4)",
        "return str(tools.add(task['a'], task['b']))",
    )
    long = body("llm.chat([{'role': 'user', 'content': 'late'}], max_tokens=400)", "return '0'")
    engine = PacedEngine(*tiny, max_batch=8)
    limits = RunnerLimits(workers=4, rollout_timeout_s=3.0)
    runner = RolloutRunner(engine, add_domain, SAMPLING, limits, seed=1)
    try:
        jobs = [RolloutJob(add_domain.tasks[3], harness(long, "s"), 0)]
        jobs += [RolloutJob(t, harness(quick, "q"), 0) for t in add_domain.tasks[:3]]
        rollouts = runner.run(jobs)
    finally:
        runner.close()
    assert rollouts[0].error.startswith("timeout: rollout ran over") and not rollouts[0].calls
    assert all(r.error is None and r.reward == 1.0 for r in rollouts[1:])
    # answered as their rows finished, while the long call was still decoding
    assert max(r.timings["wall_s"] for r in rollouts[1:]) < rollouts[0].timings["wall_s"]
    assert not engine.busy and not runner._owners  # the long call was cancelled, nothing left queued


def test_a_replay_is_answered_from_its_script_and_never_by_the_engine(make_runner, add_domain, fake_engine):
    """The i-th call on a conversation gets the script's i-th reply (its last when there are fewer); a
    conversation the script lacks gets ''; the engine sees nothing, and the verifier still scores."""
    source = body(
        "plan = llm.chat([{'role': 'user', 'content': 'plan'}])",
        "votes = llm.chat([{'role': 'user', 'content': 'answer'}], n=3)",
        "lost = llm.chat([{'role': 'user', 'content': 'off the script'}])",
        "return '|'.join([plan, *votes, lost]) if lost else votes[-1]",
    )
    script = {
        conversation_key([{"role": "user", "content": "plan"}]): ("a plan",),
        conversation_key([{"role": "user", "content": "answer"}]): ("0", add_domain.tasks[1].gold["answer"]),
    }
    runner = make_runner(workers=1)
    [replayed] = runner.run([RolloutJob(add_domain.tasks[1], harness(source), 0, script=script)])
    assert replayed.error is None and fake_engine.batch_sizes == []
    assert [c.text for c in replayed.calls] == ["a plan", "0", "14", "14", ""]
    assert {c.finish_reason for c in replayed.calls} == {"scripted"}
    assert all(c.completion_ids == [] for c in replayed.calls)
    assert replayed.answer == "14" and replayed.reward == 1.0


def test_lockstep_repeats_every_batch_whatever_the_harnesses_timing(tiny, add_domain):
    """Harnesses that compute for a random while between calls change which calls share a decode step
    from one run to the next; in lockstep the engine waits for all of them, so every step's batch, and
    the samples, repeat exactly (bfloat16 logits depend on the batch, so its draws need this)."""

    class LoggedEngine(FastEngine):
        def step(self) -> list:
            self.log.append(tuple(sorted(r.request.seed for r in self._rows + self._pending)))
            return super().step()

    dawdle = "for _ in range(random.randrange(300000)): pass"
    source = "import random\n" + body(
        dawdle,
        "llm.chat([{'role': 'user', 'content': 'q' + str(task['a'])}], max_tokens=6)",
        dawdle,
        "s = tools.add(task['a'], task['b'])",
        dawdle,
        "llm.chat([{'role': 'user', 'content': 'again'}], n=2, max_tokens=5)",
        "return str(s)",
    )
    jobs = [RolloutJob(t, harness(source), s) for t in add_domain.tasks for s in range(2)]

    def sampled(lockstep: bool) -> tuple[list, list]:
        engine = LoggedEngine(*tiny, max_batch=8)
        engine.log = []
        runner = RolloutRunner(engine, add_domain, SAMPLING, RunnerLimits(workers=6, lockstep=lockstep), 3)
        try:
            rollouts = runner.run(jobs)
        finally:
            runner.close()
        assert all(r.error is None and r.reward == 1.0 and len(r.calls) == 3 for r in rollouts)
        return engine.log, [[c.completion_ids for c in r.calls] for r in rollouts]

    first, second = sampled(True), sampled(True)
    assert first == second
    free = sampled(False)
    assert free[1] == first[1]  # the tiny model in float32 does not feel the batch: same samples
    assert free[0] != first[0] or sampled(False)[0] != free[0]  # the timing did move the batches


def test_lockstep_serves_a_batch_engine_once_no_rollout_computes(tiny, add_domain):
    source = body(
        "s = tools.add(task['a'], task['b'])", "llm.chat([{'role': 'user', 'content': 'x'}])", "return str(s)"
    )
    runner = RolloutRunner(HFEngine(*tiny), add_domain, SAMPLING, RunnerLimits(workers=4, lockstep=True), 3)
    try:
        rollouts = runner.run([RolloutJob(t, harness(source), 0) for t in add_domain.tasks])
    finally:
        runner.close()
    assert all(r.error is None and r.reward == 1.0 for r in rollouts)
    assert runner.engine_calls == 2  # four workers, then the other two tasks: nobody was served alone
