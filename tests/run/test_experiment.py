"""A whole run through the experiment loop, in process, on the tiny model."""

from __future__ import annotations

import io

from rich.console import Console

from whale.core import provenance
from whale.core.config import load_config
from whale.core.files import read_json, read_jsonl
from whale.core.provenance import code_version
from whale.harness.records import HarnessCandidate
from whale.run.experiment import Experiment
from whale.run.proposing import EMPTY_SEARCHES
from whale.search.proposer import Proposal, ProposalRequest


def test_a_harness_only_run_that_races_its_challengers_records_what_each_decision_cost(tmp_path, monkeypatch):
    cfg = load_config("tiny", None, [
        "schedule.method=harness-only", "search.acceptance=race", "schedule.budget_rollouts=40",
        "eval.k=1", "runner.workers=4",
    ])  # fmt: skip
    Experiment(cfg, tmp_path / "run", Console(file=io.StringIO())).run()
    state = read_json(tmp_path / "run" / "state.json")
    assert state["code_versions"] == [code_version()]  # the commit every number of this run came from
    monkeypatch.setattr(provenance, "code_version", lambda: "abc1234")
    resumed = Experiment(cfg, tmp_path / "run", Console(file=io.StringIO()), resume=True)
    assert resumed.state.code_versions == [code_version(), "abc1234"]  # written at its next commit
    iterations = [
        e for e in read_jsonl(tmp_path / "run" / "events.jsonl") if e["event"] == "search_iteration"
    ]
    assert iterations, "the run made no search iteration"
    for e in iterations:
        screened = [c for c in e["candidates"]]
        if screened:  # raced: the decision's cost is recorded, and it is part of what the iteration spent
            assert 0 < e["decision_rollouts"] <= e["spent"]
            assert e["reason"].startswith(("no challenger passed", "c0"))
        else:
            assert "decision_rollouts" not in e or e["decision_rollouts"] is None


class Repeats:
    """A proposer that only ever offers the incumbent's own code again (a duplicate: costs no rollouts)."""

    name = "repeats"

    def propose(self, request: ProposalRequest) -> Proposal:
        parent = request.parents[0]
        return Proposal(
            [HarnessCandidate(request.next_id(), parent.source, parent.id, "the same", self.name)]
        )


def test_a_harness_only_run_whose_proposer_offers_nothing_new_ends_instead_of_spinning(tmp_path, monkeypatch):
    monkeypatch.setattr("whale.run.experiment.build_proposer", lambda *args: Repeats())
    cfg = load_config("tiny", None, [
        "schedule.method=harness-only", "schedule.budget_rollouts=100000", "eval.k=1", "runner.workers=4",
    ])  # fmt: skip
    Experiment(cfg, tmp_path / "run", Console(file=io.StringIO())).run()
    events = read_jsonl(tmp_path / "run" / "events.jsonl")
    assert sum(e["event"] == "search_iteration" for e in events) == EMPTY_SEARCHES
    assert events[-1]["event"] == "end"
    assert (
        events[-1]["reason"]
        == f"stopped early, the proposer offered no new runnable candidate in {EMPTY_SEARCHES} iterations"
    )
