"""The sandbox must stay usable: ordinary stdlib code in allowed modules works under the audit hook."""

from __future__ import annotations

import pytest

from tests.processes import alive
from whale.domains.math import MathDomain
from whale.harness.calls import RolloutJob, RunnerLimits
from whale.harness.records import HarnessCandidate
from whale.harness.runner import RolloutRunner
from whale.harness.task import Task
from whale.model.engine import Generation, GenerationRequest, SamplingParams
from whale.search.mutation import set_knobs

STDLIB_EXPRESSIONS = [
    "collections.Counter('aab').most_common(1)",
    "statistics.mode([1, 1, 2])",
    "statistics.median([1, 2, 3])",
    "statistics.stdev([1, 2, 3])",
    "collections.namedtuple('P', 'x y')(1, 2)",
    "re.compile('x+').findall('xx x')",
    "re.sub(r'a+', 'b', 'aaa')",
    "json.dumps({'a': [1.5]})",
    "random.Random(1).choice([1, 2])",
    "functools.lru_cache(None)(lambda x: x)(1)",
    "string.Template('$a').substitute(a=1)",
    "list(itertools.groupby('aab'))",
    "math.comb(5, 2)",
]


class AnswerEngine:
    """Replies with a fixed text; the harness code, the sandbox and the verifier are what is tested."""

    weights_version = "w0"

    def __init__(self, text: str):
        self.text = text

    def generate(self, requests: list[GenerationRequest], seed: int) -> list[Generation]:
        return [Generation(self.text, [1], [2], "eos") for _ in requests]


class NoToolDomain:
    def toolbox(self, task: Task):
        return MathDomain().toolbox(task)

    def verify(self, task: Task, answer: str | None, toolbox) -> float:
        return 0.0


def test_allowed_modules_work_inside_the_sandbox() -> None:
    header = "import collections, statistics, re, json, random, functools, string, itertools, math\n"
    jobs = [
        RolloutJob(
            Task("t", {}, {}),
            HarnessCandidate(f"h{i}", f"{header}def run(task, llm, tools):\n    return str({e})\n"),
            0,
        )
        for i, e in enumerate(STDLIB_EXPRESSIONS)
    ]
    runner = RolloutRunner(AnswerEngine("x"), NoToolDomain(), SamplingParams(), RunnerLimits(workers=4))
    try:
        out = runner.run(jobs)
    finally:
        runner.close()
    failures = {e: r.error for e, r in zip(STDLIB_EXPRESSIONS, out, strict=True) if r.error}
    assert failures == {}


@pytest.mark.parametrize(
    "knobs", [{}, {"USE_CALCULATOR": True}, {"N_VOTES": 3}, {"USE_CALCULATOR": True, "RETRIES": 1}]
)
def test_math_seed_harness_scores_in_the_real_sandbox(knobs: dict) -> None:
    domain = MathDomain(
        sizes={"train": 4, "search": 4, "val": 4, "test": 4},
        levels={s: [1] for s in ("train", "search", "val", "test")},
    )
    task = domain.splits()["val"][0]
    gold = task.gold["answer"]
    reply = (
        f"Expression: {task.gold['expression']}" if knobs.get("USE_CALCULATOR") else f"The answer is {gold}."
    )
    harness = HarnessCandidate("h", set_knobs(domain.seed_harness(), knobs))
    runner = RolloutRunner(AnswerEngine(reply), domain, SamplingParams(), RunnerLimits(workers=2))
    try:
        (rollout,) = runner.run([RolloutJob(task, harness, 0)])
    finally:
        runner.close()
    assert rollout.error is None
    assert rollout.answer == str(gold)
    assert rollout.reward == 1.0
    assert bool(rollout.tool_calls) == bool(knobs.get("USE_CALCULATOR"))


def test_workers_die_with_their_parent(tmp_path) -> None:
    """A harness stuck in a loop must not outlive a parent killed with SIGKILL."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "from whale.domains.base import Task\n"
        "from whale.harness.records import HarnessCandidate\n"
        "from whale.harness.runner import RolloutJob, RolloutRunner, RunnerLimits\n"
        "from whale.model.engine import SamplingParams\n"
        "from whale.domains.math import MathDomain\n"
        "class E:\n    weights_version = 'w'\n"
        "domain = MathDomain(sizes={'train': 1, 'search': 1, 'val': 1, 'test': 1})\n"
        "r = RolloutRunner(E(), domain, SamplingParams(), RunnerLimits(workers=1, step_timeout_s=600))\n"
        "h = HarnessCandidate('loop', 'def run(task, llm, tools):\\n    while True:\\n        pass\\n')\n"
        "r.run([RolloutJob(Task('t', {}, {}), h, 0)])\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    worker_pid = None
    deadline = time.monotonic() + 30
    while worker_pid is None and time.monotonic() < deadline:
        out = subprocess.run(["pgrep", "-P", str(parent.pid)], capture_output=True, text=True).stdout.split()
        worker_pid = int(out[0]) if out else None
        time.sleep(0.1)
    assert worker_pid is not None, parent.stderr.read() if parent.poll() is not None else "no worker started"
    time.sleep(1.0)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(worker_pid):
        time.sleep(0.1)
    assert not alive(worker_pid)
