"""Evaluation journals: a run killed in the middle of an evaluation keeps the rollouts it had finished, and
uses them again only for the very weights and harness they were drawn under."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch
from rich.console import Console

from tests.conftest import AddDomain, FakeEngine
from whale.core.files import read_jsonl
from whale.core.progress import track
from whale.harness.calls import RunnerLimits
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.runner import RolloutRunner
from whale.model.engine import SamplingParams
from whale.run.evaluation import SPLITS, Journal, evaluate, evaluate_split, interleaved, weights_digest
from whale.run.rundir import RunDir, RunState

BARS = partial(track, Console(quiet=True))
K = 2


def evaluated(journal: Journal | None, harness: HarnessCandidate) -> tuple[list[Rollout], int]:
    """The val evaluation through a real runner, and how many model calls it made (one per rollout drawn)."""
    domain, engine = AddDomain(), FakeEngine()
    runner = RolloutRunner(
        engine, domain, SamplingParams(temperature=0.7, max_tokens=4), RunnerLimits(workers=2)
    )
    try:
        rollouts = evaluate_split(runner, harness, domain.splits()["val"], K, BARS, "val", journal)
    finally:
        runner.close()
    return rollouts, sum(engine.batch_sizes)


def comparable(rollouts: list[Rollout]) -> list[tuple]:
    return [(r.task_id, r.sample, r.answer, r.reward) for r in rollouts]


def test_a_killed_evaluation_draws_only_what_its_journal_lacks(tmp_path: Path):
    harness = HarnessCandidate("c0000", AddDomain().seed_harness())
    path = tmp_path / "journal" / "val.jsonl"
    whole, drawn = evaluated(Journal(path, "weights-a"), harness)
    assert drawn == len(whole) == 6 * K and len(read_jsonl(path)) == 1 + len(whole)  # the key, then each

    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:6]) + lines[6][:25])  # killed mid-append: 5 rollouts and a torn one
    resumed, drawn = evaluated(Journal(path, "weights-a"), harness)
    assert drawn == len(whole) - 5
    assert comparable(resumed) == comparable(whole)  # in job order, the journaled ones in their places
    assert len(read_jsonl(path)) == 1 + len(whole)

    _, drawn = evaluated(Journal(path, "weights-b"), harness)  # the unit was redone: other weights
    assert drawn == len(whole)
    edited = HarnessCandidate("c0000", harness.source + "\n# edited\n")  # same id, other code
    _, drawn = evaluated(Journal(path, "weights-b"), edited)
    assert drawn == len(whole)


def test_the_digest_tells_weights_apart_by_value_and_name():
    a = {"layer.weight": torch.ones(3, 2), "layer.bias": torch.zeros(2)}
    assert weights_digest(a) == weights_digest({k: v.clone() for k, v in reversed(a.items())})
    nudged = {**a, "layer.bias": torch.tensor([0.0, 1e-7])}
    assert weights_digest(nudged) != weights_digest(a)
    assert weights_digest(
        {"other.bias": a["layer.bias"], "layer.weight": a["layer.weight"]}
    ) != weights_digest(a)
    assert weights_digest({k: v.bfloat16() for k, v in a.items()}) != weights_digest(a)


def test_a_commit_drops_the_journals_of_points_it_holds(tmp_path: Path):
    run = RunDir(tmp_path)
    for point in (0, 1):
        file = run.journal_file(point, "val (new weights, old harness)")
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text('{"key": "x"}\n')
    run.commit(RunState(schedule={}, budget={}, eval_points=1), [])
    assert not run.journal_file(0, "val (new weights, old harness)").exists()
    assert run.journal_file(1, "val (new weights, old harness)").exists()  # still being evaluated


class DisjointSplits(AddDomain):
    """Val and test hold different tasks, so a worker of one may not serve the other."""

    def splits(self) -> dict[str, list]:
        return {"val": self.tasks[:3], "test": self.tasks[3:]}


def test_an_evaluation_point_runs_both_splits_at_once_into_their_own_journals(tmp_path: Path):
    """Val and test go to the runner in one call, interleaved, so each split's workers keep serving
    their own split: 4 start, one per slot, where one call per split started 8. Only in the tail, once
    one split has no job left, may a slot its worker frees start a worker of the other split (at most
    2 here), rather than idle. Each split's rollouts, in job order, are the ones its own evaluation
    draws, and land in its journal."""
    domain = DisjointSplits()
    runner = RolloutRunner(
        FakeEngine(), domain, SamplingParams(temperature=0.7, max_tokens=4), RunnerLimits(workers=4)
    )
    spawn, started = runner._spawn, []
    runner._spawn = lambda: started.append(1) or spawn()
    harness = HarnessCandidate("c0000", domain.seed_harness())
    try:
        scored = evaluate(runner, harness, domain.splits(), K, BARS, lambda s: Journal(tmp_path / s, "w"))
        assert 4 <= len(started) <= 6
        alone = {s: evaluate_split(runner, harness, domain.splits()[s], K, BARS, s) for s in SPLITS}
    finally:
        runner.close()
    for split in SPLITS:
        rollouts, score = scored[split]
        assert comparable(rollouts) == comparable(alone[split])
        assert [(t.id, s) for t in domain.splits()[split] for s in range(K)] == [
            (r.task_id, r.sample) for r in rollouts
        ]
        journaled = [Rollout.from_json(row) for row in read_jsonl(tmp_path / split)[1:]]
        assert sorted(comparable(journaled)) == sorted(comparable(rollouts))
        assert score["mean"] == sum(r.reward for r in rollouts) / len(rollouts)


def test_interleaving_spreads_each_group_over_the_whole():
    mixed = interleaved([["v0", "v1"], ["t0", "t1", "t2", "t3"]])
    assert sorted(mixed) == ["t0", "t1", "t2", "t3", "v0", "v1"]
    assert mixed.index("v0") < 3 <= mixed.index("v1")  # one of each half
    assert [x for x in mixed if x[0] == "t"] == ["t0", "t1", "t2", "t3"]  # each group in its own order
    assert interleaved([[], ["a"]]) == ["a"]
