"""Shared fixtures: the real tiny Llama model with the embedded SmolLM2 tokenizer."""

from __future__ import annotations

import copy
import fcntl
import io
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from rich.console import Console

from whale.domains.base import SPLITS
from whale.harness.task import Task, ToolError
from whale.model.engine import Generation, GenerationRequest
from whale.model.loading import load_model, tiny_model
from whale.model.sampling import chat_prompt_ids

SHARP_PROBE = "What is 2 plus 3? Explain it in detail, step by step, with many words."

# The tiny model's matrices are 64 wide: one thread is far faster than several contending ones.
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    """(model, tokenizer) from `load_model("tiny")`, shared by the tests of one module (do not train it)."""
    return load_model("tiny")


@pytest.fixture(scope="module")
def sharp_tiny(tiny: tuple[Any, Any]) -> tuple[Any, Any]:
    """A copy of the tiny model with larger random weights, so that outputs depend on the prompt, and an
    untied output row for EOS aligned with typical hidden states, so that rows end on EOS at varied steps.
    (The stock tiny model has near-uniform logits and greedily repeats one token for every prompt.)"""
    model, tokenizer = tiny
    model = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 if "embed" in name else 0.3))
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
        ids = torch.tensor([chat_prompt_ids(tokenizer, [{"role": "user", "content": SHARP_PROBE}])])
        hidden = model.model(input_ids=ids).last_hidden_state[0]
        mean_h = hidden.mean(0)
        scale = model.lm_head(hidden).max(-1).values.mean() / (hidden @ mean_h).mean()
        model.lm_head.weight[tokenizer.eos_token_id] = 0.7 * scale * mean_h
    model.eval()
    return model, tokenizer


@pytest.fixture(scope="module")
def tokenizer(tiny: tuple[Any, Any]) -> Any:
    return tiny[1]


@pytest.fixture
def make_tiny(tokenizer: Any) -> Callable[..., Any]:
    """A factory for fresh tiny models that `load_model("tiny")` would build (for tests that train)."""

    def make(seed: int = 0) -> Any:
        model = tiny_model(len(tokenizer), seed)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        return model

    return make


# ---- test doubles for the domain and engine seams (real-model runs are covered in tests/model) ----------

SECRET = "GOLD-SECRET-7f3a"

GOOD_HARNESS = """\
def run(task, llm, tools):
    reply = llm.chat([{"role": "user", "content": "add " + str(task["a"]) + " and " + str(task["b"])}])
    return str(tools.add(task["a"], task["b"]))
"""


class AddToolbox:
    names = ("add",)

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if not all(isinstance(a, int) for a in args) or kwargs:
            raise ToolError("add takes integers")
        return sum(args)


class AddDomain:
    """Tasks 'add a and b'; the gold answer (and a secret marker) live only in Task.gold."""

    name = "add"
    brief = "Add two integers; a tool `add(a, b)` is available."

    def __init__(self, n: int = 6):
        self.tasks = [
            Task(f"add-{i}", {"a": i, "b": 10 * i + 3}, {"answer": str(11 * i + 3), "secret": SECRET})
            for i in range(n)
        ]

    def splits(self) -> dict[str, list[Task]]:
        return {split: list(self.tasks) for split in SPLITS}

    def seed_harness(self) -> str:
        return GOOD_HARNESS

    def toolbox(self, task: Task) -> AddToolbox:
        return AddToolbox()

    def verify(self, task: Task, answer: str | None, toolbox: Any) -> float:
        return 1.0 if answer == task.gold["answer"] else 0.0

    def knob_pool(self) -> dict[str, list[Any]]:
        return {}


class FakeEngine:
    """Answers every request at once and records the batch sizes it was given."""

    def __init__(self, weights_version: str = "w-fake"):
        self.weights_version = weights_version
        self.batch_sizes: list[int] = []
        self.seeds: list[int] = []

    def generate(self, requests: list[GenerationRequest], seed: int) -> list[Generation]:
        self.batch_sizes.append(len(requests))
        self.seeds.append(seed)
        out = []
        for r in requests:
            text = "echo: " + r.messages[-1]["content"]
            ids = list(range(1, min(r.params.max_tokens, 5) + 1))
            out.append(Generation(text, [len(r.messages), 7, 7], ids, "length"))
        return out


@pytest.fixture
def add_domain() -> AddDomain:
    return AddDomain()


@pytest.fixture
def fake_engine() -> FakeEngine:
    return FakeEngine()


# ---- one finished run, shared by the agent-bundle and serving tests ---------------------------------------

REPLY_HARNESS = """\
def run(task, llm, tools):
    return llm.chat([{"role": "user", "content": task["question"]}], max_tokens=8)
"""


@pytest.fixture(scope="session")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run under greedy decoding (weight-only; evaluation points at 0, 8 and 16 rollouts,
    i.e. weights w0, w2, w4) whose harness answers with the model's reply, so an answer is model output.
    `checkpoints.keep_every=2` keeps the weights of points 0 and 2 (and the best by validation) only."""
    from whale.core.config import load_config
    from whale.run.experiment import Experiment

    folder = tmp_path_factory.mktemp("agent-run")
    (folder / "reply.py").write_text(REPLY_HARNESS)
    cfg = load_config("tiny", None, [
        "sampling.temperature=0", f"domain.harness={folder / 'reply.py'}",
        "domain.sizes={train: 20, search: 3, val: 3, test: 3}", "rft.tasks_per_step=2", "rft.k=2",
        "eval.k=1", "eval.every_rollouts=8", "schedule.method=weight-only", "schedule.budget_rollouts=16",
        "checkpoints.keep_every=2", "runner.workers=4",
    ])  # fmt: skip
    Experiment(cfg, folder / "run", Console(file=io.StringIO())).run()
    return folder / "run"


@pytest.fixture(scope="session")
def agent_bundle(agent_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's last agent version (trained weights w4), exported with merged weights."""
    from whale.deploy.bundle import export_bundle
    from whale.deploy.versions import agent_versions

    out = tmp_path_factory.mktemp("bundles") / "w4"
    export_bundle(agent_run, agent_versions(agent_run)[-1], out)
    return out


def session_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder shared by every xdist worker of this test session (each worker has its own basetemp)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`whale compare` of the six methods on the tiny preset, one seed: (its folder, its stdout). Built
    once per session, under a lock, by whichever worker needs it first (it takes minutes); each worker
    gets its own copy, since tests edit and re-run it."""
    from tests.cli.test_cli import whale

    built = session_folder(tmp_path_factory) / "compare-tiny"
    with open(built.parent / "compare-tiny.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (built / "stdout.txt").is_file():
            methods = "whale,whale-adaptive,weight-only,harness-only,stagewise,fast-slow"
            cmd = ("compare", "--domain", "math", "--methods", methods, "--preset", "tiny")
            proc = whale(*cmd, "--out", str(built / "cmp"), timeout=1200)
            assert proc.returncode == 0, proc.stderr[-3000:]
            (built / "stdout.txt").write_text(proc.stdout)
    out = tmp_path_factory.mktemp("compare") / "cmp"
    shutil.copytree(built / "cmp", out)
    return out, (built / "stdout.txt").read_text()
