"""The minimal-prompt seeds (`domain.minimal_seed`, a control of issue 32): on every built-in domain, in
the sandbox, a model that replies with the right answer in a chatty sentence scores 1 under the minimal
harness, and the harness is shorter than the domain's own seed."""

from __future__ import annotations

import json
from typing import Any

import chess
import pytest

from whale.core.config import ConfigError, DomainConfig, load_config
from whale.domains.registry import MINIMAL_SEEDS, build_domain, minimal_seed
from whale.harness import validate
from whale.harness.calls import RolloutJob
from whale.harness.records import HarnessCandidate
from whale.harness.runner import RolloutRunner, RunnerLimits
from whale.model.engine import Generation, SamplingParams
from whale.run.preflight import seed_candidate


class Replies:
    """Answers every request with `reply(prompt)`."""

    weights_version = "w-script"

    def __init__(self, reply: Any):
        self.reply = reply

    def generate(self, requests: list, seed: int) -> list[Generation]:
        return [Generation(self.reply(r.messages[-1]["content"]), [1], [2], "eos") for r in requests]


def code_lines(source: str) -> int:
    return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


REPLY = {  # where each minimal seed looks for the answer: a first line, a last line, a last number, a move
    "searchqa": "{}\nThat is my answer.", "math": "Let me think.\nThe answer is {}", "chess": "I play {}!",
    "reasoning-gym": "Hmm.\n{}", "qa": "Hmm.\n{}",
}  # fmt: skip


def solver_move(task: Any, prompt: str) -> str:
    """The gold line's move for the position the prompt shows (its first line is the FEN)."""
    board = chess.Board(task.inputs["fen"])
    for uci in task.gold["line"]:
        move = chess.Move.from_uci(uci)
        if board.fen() == prompt.splitlines()[0]:
            return board.san(move)
        board.push(move)
    raise AssertionError("the prompt's position is not on the gold line")


def domain_and_task(tmp_path, name: str) -> tuple[Any, Any]:
    small = {"train": 1, "search": 1, "val": 1, "test": 1}
    rows = tmp_path / "qa.jsonl"
    rows.write_text(
        "".join(json.dumps({"question": f"Capital {i}?", "answer": "Paris"}) + "\n" for i in range(8))
    )
    options = {"path": str(rows)} if name == "qa" else {}
    domain = build_domain(DomainConfig(name=name, sizes=small, options=options))
    return domain, domain.splits()["val"][0]


@pytest.mark.parametrize("name", sorted(MINIMAL_SEEDS))
def test_each_minimal_seed_answers_in_its_domains_format_and_is_shorter_than_the_seed(tmp_path, name):
    domain, task = domain_and_task(tmp_path, name)
    source = minimal_seed(name)
    assert validate.problems(source) == []
    assert code_lines(source) < code_lines(domain.seed_harness())

    def reply(prompt: str) -> str:
        if name == "chess":
            return REPLY[name].format(solver_move(task, prompt))
        gold = task.gold["answers"][0] if "answers" in task.gold else task.gold["answer"]
        return REPLY[name].format(gold)

    runner = RolloutRunner(Replies(reply), domain, SamplingParams(), RunnerLimits(workers=1))
    try:
        (rollout,) = runner.run([RolloutJob(task, HarnessCandidate("m", source), 0)])
    finally:
        runner.close()
    assert rollout.error is None and rollout.reward == 1.0, (rollout.answer, task.gold)


def test_the_minimal_seed_is_chosen_by_config_and_refused_where_it_does_not_exist(tmp_path):
    cfg = load_config("tiny", None, ["domain.minimal_seed=true"])
    domain = build_domain(cfg.domain)
    assert seed_candidate(cfg, domain).source == minimal_seed("math")
    both = load_config("tiny", None, ["domain.minimal_seed=true", f"domain.harness={tmp_path / 'h.py'}"])
    with pytest.raises(ConfigError, match="set one, not both"):
        seed_candidate(both, domain)
    with pytest.raises(ConfigError, match="only built-in domains"):
        minimal_seed("parity_domain")
