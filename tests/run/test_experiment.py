"""A whole run through the experiment loop, in process, on the tiny model."""

from __future__ import annotations

import io
import json

import torch
from rich.console import Console

from whale.core import provenance
from whale.core.config import load_config
from whale.core.files import atomic_write_text, read_json, read_jsonl
from whale.core.provenance import code_version
from whale.harness.records import HarnessCandidate
from whale.report.write import write_report
from whale.run.experiment import Experiment
from whale.run.proposing import EMPTY_SEARCHES
from whale.search.acceptance import Trial, Verdict, evaluate_all
from whale.search.archive import CandidateEval
from whale.search.mechanisms import MECHANISMS
from whale.search.proposer import Proposal, ProposalRequest


def test_a_harness_only_run_that_races_its_challengers_records_what_each_decision_cost(tmp_path, monkeypatch):
    cfg = load_config("tiny", None, [
        "schedule.method=harness-only", "search.acceptance=race", "schedule.budget_rollouts=40",
        "eval.k=1", "runner.workers=4",
    ])  # fmt: skip
    Experiment(cfg, tmp_path / "run", Console(file=io.StringIO())).run()
    state = read_json(tmp_path / "run" / "state.json")
    assert state["code_versions"] == [code_version()]  # the commit every number of this run came from
    assert state["machines"] == [provenance.machine()]  # and the CPU its wall times came from
    monkeypatch.setattr(provenance, "code_version", lambda: "abc1234")
    monkeypatch.setattr(provenance, "machine", lambda: "Other CPU, 64 cores, avx2")
    events = read_jsonl(tmp_path / "run" / "events.jsonl")
    started = events[0]["config"]
    assert events[0]["event"] == "start" and started["engine"]["dtype"] in ("float32", "bfloat16")
    assert started["runner"]["lockstep"] == (started["engine"]["dtype"] == "bfloat16")  # decided, recorded
    began = {
        **started,
        "engine": {**started["engine"], "dtype": "bfloat16"},
        "weights": {**started["weights"], "dtype": "bfloat16"},
        "runner": {**started["runner"], "lockstep": True},
    }
    lines = [json.dumps(e) for e in [{**events[0], "config": began}, *events[1:]]]
    atomic_write_text(tmp_path / "run" / "events.jsonl", "\n".join(lines) + "\n")
    resumed = Experiment(cfg, tmp_path / "run", Console(file=io.StringIO()), resume=True)
    assert resumed.state.code_versions == [code_version(), "abc1234"]  # written at its next commit
    assert resumed.state.machines == [state["machines"][0], "Other CPU, 64 cores, avx2"]
    # as begun (here: on a machine where bfloat16 measured faster), not as a probe would decide today
    assert resumed.runner.engine.dtype == torch.bfloat16 and resumed.trainer.config.dtype == "bfloat16"
    assert resumed.resolved.runner.lockstep is True
    iterations = [
        e for e in read_jsonl(tmp_path / "run" / "events.jsonl") if e["event"] == "search_iteration"
    ]
    assert iterations, "the run made no search iteration"
    for e in iterations:
        # what each challenger tried, kept for study summaries: the program proposer names its mechanism
        assert set(e["candidates"]) | set(e["failed"]) <= set(e["hypotheses"])
        assert all(h.split(" ")[0].split(":")[0] in MECHANISMS for h in e["hypotheses"].values())
        screened = [c for c in e["candidates"]]
        if screened:  # raced: the decision's cost is recorded, and it is part of what the iteration spent
            assert 0 < e["decision_rollouts"] <= e["spent"]
            assert e["reason"].startswith(("no challenger passed", "c0"))
        else:
            assert not e.get("decision_rollouts")  # none, or 0 when the budget ended before the first look


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


class Always:
    """An acceptance rule that takes the first challenger the budget can score, untested: every search
    unit then changes the harness, so a point a unit runs past shows which harness it scored."""

    name = "always"

    def judge(self, trial: Trial, challengers: list[HarnessCandidate], incumbent: CandidateEval) -> Verdict:
        evals = evaluate_all(trial, challengers[:1])
        return Verdict(evals[0].candidate_id, "always", {}, evals[0].rollouts) if evals else Verdict(None, "")


def test_a_point_a_search_unit_runs_past_scores_the_harness_held_before_it(tmp_path, monkeypatch):
    """Each evaluation point scores the agent held when its share of the budget had been spent: a unit
    changes the harness only when it ends, and the last unit is cut to what the budget can pay for."""
    monkeypatch.setattr("whale.search.search_step.build_acceptance", lambda kind, alpha: Always())
    cfg = load_config("tiny", None, [
        "schedule.method=harness-only", "schedule.budget_rollouts=40", "eval.every_rollouts=15", "eval.k=1",
        "runner.workers=4", "domain.sizes={train: 50, search: 4, val: 2, test: 2}", "proposer.kind=mutation",
    ])  # fmt: skip
    out = tmp_path / "run"
    Experiment(cfg, out, Console(file=io.StringIO())).run()
    state, points, events = (
        read_json(out / "state.json"),
        read_jsonl(out / "evals.jsonl"),
        read_jsonl(out / "events.jsonl"),
    )
    assert 40 - 4 < state["budget"]["search_rollouts"] <= 40
    assert [p["rollouts"] for p in points] == [0, 15, 30, 40]
    searches = [e for e in events if e["event"] == "search_iteration"]
    assert len({e["incumbent"] for e in searches}) >= len(searches) - 1 >= 2  # each took a new harness
    ran_past = 0
    for p in points[1:-1]:
        unit = next(e for e in searches if e["rollouts"] >= p["rollouts"])
        held = [e["incumbent"] for e in searches if e["rollouts"] < unit["rollouts"]] or ["c0000"]
        assert p["harness"] == (unit["incumbent"] if unit["rollouts"] == p["rollouts"] else held[-1])
        ran_past += unit["rollouts"] > p["rollouts"]
    assert ran_past and points[-1]["harness"] == state["incumbent"]
    assert events[-1]["reason"].startswith("budget spent")


def test_a_whale_gain_run_probes_the_weights_then_the_harness_and_logs_why(tmp_path):
    cfg = load_config("tiny", None, [
        "schedule.method=whale-gain", "schedule.budget_rollouts=60", "eval.every_rollouts=20", "eval.k=1",
        "runner.workers=4", "domain.sizes={train: 50, search: 4, val: 2, test: 2}",
    ])  # fmt: skip
    Experiment(cfg, tmp_path / "run", Console(file=io.StringIO())).run()
    events = read_jsonl(tmp_path / "run" / "events.jsonl")
    # every evaluation point adds each side's val effect per rollout it spent since the last one
    state, points = read_json(tmp_path / "run" / "state.json"), read_jsonl(tmp_path / "run" / "evals.jsonl")
    measured = state["measured"]
    assert len(measured["weights"]) + len(measured["harness"]) >= 1
    assert len(measured["weights"]) <= sum(1 for p in points[1:] if "effects" in p)
    budget = state["budget"]
    assert measured["at"] == {"weights": budget["train_rollouts"], "harness": budget["search_rollouts"]}
    switches = [e for e in events if e["event"] == "phase_switch"]
    assert switches and (switches[0]["from"], switches[0]["to"]) == ("weights", "harness")
    assert switches[0]["signals"]["why"] == "probe: harness not measured yet"
    assert switches[0]["signals"]["gains"]["weights"]  # the weight phase's gain per rollout, recorded
    kinds = [e["event"] for e in events]
    assert "search_iteration" in kinds and "weight_step" in kinds and kinds[-1] == "end"
    page = write_report(tmp_path / "run").read_text()
    phases = page[page.index('id="phases"') :]
    assert "weights \u2192 harness" in phases and "probe: harness not measured yet" in phases
