"""A deployed agent: a verified bundle's model, harness and domain tools, answering tasks.

It runs the harness the way training did: in sandbox worker processes (the harness is still untrusted
code), model calls batched in this process by a RolloutRunner, tools served by the domain here. Given
the same inputs and sampling it therefore answers as the run's evaluation did; under temperature 0 with
the same answer. Each model call's seed comes from the inputs (their hash names the task), so asking the
same question twice samples the same way.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whale.deploy.bundle import BundleError, bundle_config, load_bundle_model, verify_bundle
from whale.harness import validate
from whale.harness.calls import RolloutJob
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.runner import RolloutRunner
from whale.harness.task import Task

MAX_INPUT_CHARS = 100_000  # one task's inputs as JSON, as the runner caps a prompt


@dataclass
class AgentAnswer:
    agent: str
    answer: str | None
    error: str | None  # a failed rollout's reason (whale.harness.runner lists the kinds)
    reward: float | None  # only for a domain task, whose gold data the verifier reads
    trace: Rollout  # every model call with exact token ids, every tool call, logs, timings

    def to_json(self, trace: bool = True) -> dict[str, Any]:
        out = {"agent": self.agent, "answer": self.answer, "error": self.error, "reward": self.reward}
        return {**out, "trace": self.trace.to_json()} if trace else out


def task_from_inputs(inputs: Any, where: str = "input") -> Task:
    """A user's task: a JSON object of the domain's inputs (no gold, so no reward), named by its hash."""
    if not isinstance(inputs, dict):
        raise ValueError(f"{where}: expected a JSON object of task inputs, got {type(inputs).__name__}")
    text = json.dumps(inputs, sort_keys=True)
    if len(text) > MAX_INPUT_CHARS:
        raise ValueError(f"{where}: the inputs are {len(text)} characters as JSON (limit {MAX_INPUT_CHARS})")
    return Task(f"input-{hashlib.sha256(text.encode()).hexdigest()[:12]}", inputs, {})


class Agent:
    """Call it with a dict of task inputs (or a domain Task, which also gets its reward) for an
    AgentAnswer. Thread-safe: calls are serialized; `run_many` batches many tasks through one engine."""

    def __init__(self, folder: Path, manifest: dict[str, Any], domain: Any, runner: RolloutRunner,
                 harness: HarnessCandidate):  # fmt: skip
        self.folder = folder
        self.manifest = manifest
        self.domain = domain
        self.runner = runner
        self.harness = harness
        self._lock = threading.Lock()

    @property
    def version(self) -> str:
        return self.manifest["agent"]

    def domain_task(self, task_id: str) -> Task:
        """A task of the bundle's domain by id (any split), gold included, so its answer is verified."""
        for tasks in self.domain.splits().values():
            for task in tasks:
                if task.id == task_id:
                    return task
        raise ValueError(f"task_id {task_id!r}: no such task in domain {self.manifest['domain']['name']}")

    def __call__(self, task: dict[str, Any] | Task) -> AgentAnswer:
        return self.run_many([task])[0]

    def run_many(self, tasks: list[dict[str, Any] | Task]) -> list[AgentAnswer]:
        """Answer every task in one batch of rollouts (model calls of all of them share engine batches)."""
        tasks = [t if isinstance(t, Task) else task_from_inputs(t) for t in tasks]
        with self._lock:
            refused = {i: self._tools_problem(t) for i, t in enumerate(tasks)}
            runnable = [i for i, problem in refused.items() if not problem]
            jobs = [RolloutJob(tasks[i], self.harness, 0, verify=bool(tasks[i].gold)) for i in runnable]
            done = dict(zip(runnable, self.runner.run(jobs), strict=True))
        answers = []
        for i, task in enumerate(tasks):
            rollout = done.get(i) or Rollout(
                task.id, self.harness.id, self.runner.engine.weights_version, 0, error=refused[i]
            )
            reward = rollout.reward if task.gold and rollout.error is None else None
            answers.append(AgentAnswer(self.version, rollout.answer, rollout.error, reward, rollout))
        return answers

    def _tools_problem(self, task: Task) -> str:
        """Why the domain cannot give this task its tools ("" when it can): a chess toolbox, for one,
        needs the puzzle's solution line, which only domain tasks carry."""
        try:
            self.domain.toolbox(task)
        except Exception as exc:  # noqa: BLE001 - user inputs must not take the agent down
            name = self.manifest["domain"]["name"]
            return f"invalid: the {name} tools refuse these inputs ({type(exc).__name__}: {exc})"
        return ""

    def close(self) -> None:
        """Stop the sandbox workers and the engine."""
        with self._lock:
            self.runner.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_agent(folder: str | Path, temperature: float | None = None, engine: str | None = None) -> Agent:
    """Verify the bundle in `folder` (every file's hash), then build its agent. `temperature` overrides
    the run's sampling temperature (0: greedy), `engine` its engine kind. A bad bundle raises BundleError,
    one line."""
    folder = Path(folder)
    manifest = verify_bundle(folder)  # before the heavy imports: a bad bundle is refused at once

    from whale.domains.registry import build_domain
    from whale.model.backends import build_engine
    from whale.rollout.executor import build_runner

    cfg = bundle_config(folder, manifest, temperature, engine)
    if cfg.domain.file:  # the manifest's hashes say the files are unchanged, not who wrote them
        print(
            f"whale: warning: {folder / 'domain.py'} is a domain file: it runs in this process, unsandboxed "
            "(load bundles you trust only)",
            file=sys.stderr,
        )
    source = (folder / "harness.py").read_text()
    problems = validate.problems(source)
    if problems:
        raise BundleError(f"{folder / 'harness.py'}: {problems[0]}")
    domain = build_domain(cfg.domain)
    model, tokenizer = load_bundle_model(folder, manifest)
    engine = build_engine(cfg.engine, model, tokenizer, cfg.model.max_batch)
    engine.weights_version = manifest["weights"]
    runner = build_runner(cfg, engine, domain)
    return Agent(folder, manifest, domain, runner, HarnessCandidate(manifest["harness"], source))
