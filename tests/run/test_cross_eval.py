"""The 2x2 cross-evaluation: its arithmetic, and a real tiny run in which both sides change between two
evaluation points, scored with and without it."""

from __future__ import annotations

import io

import pytest
import torch
from rich.console import Console

from whale.core.config import load_config
from whale.core.files import read_json, read_jsonl
from whale.run.cross_eval import NEW_HARNESS, NEW_WEIGHTS, cross_on, measured_effects, val_means
from whale.run.experiment import Experiment
from whale.run.rundir import EVALS, RunDir
from whale.search.acceptance import Trial, Verdict, evaluate_all
from whale.search.archive import CandidateEval
from whale.studies.bottleneck import measured_intervals, measured_totals, measured_verdict

OLD = {"a": 0.0, "b": 0.5, "c": 1.0}
W1H0 = {"a": 0.5, "b": 0.5, "c": 1.0}
W0H1 = {"a": 0.0, "b": 1.0, "c": 0.5}
NEW = {"a": 1.0, "b": 1.0, "c": 1.0}
NOT_COMPARED = ("effects", "wall_s", "parts_s")  # what differs between two otherwise equal runs


def point(n: int, weights: str, harness: str) -> dict:
    return {"point": n, "weights": weights, "harness": harness}


def test_the_full_2x2_splits_the_change_between_the_sides_and_names_the_interaction():
    both = {NEW_WEIGHTS: W1H0, NEW_HARNESS: W0H1}
    e = measured_effects(point(0, "w0", "c0"), point(1, "w2", "c3"), OLD, NEW, both)
    assert e.basis == "measured: 2x2" and e.tasks == ["a", "b", "c"] and e.from_point == 0
    assert e.weights == [0.75, 0.0, 0.25] and e.harness == [0.25, 0.5, -0.25]
    assert e.interaction == [0.5, 0.0, 0.5]
    for t, (w, h) in enumerate(zip(e.weights, e.harness, strict=True)):  # Shapley: they sum to the change
        assert w + h == pytest.approx(NEW["abc"[t]] - OLD["abc"[t]])


def test_with_one_corner_the_change_is_split_in_order_and_without_any_it_is_not_measured():
    e = measured_effects(point(0, "w0", "c0"), point(1, "w2", "c3"), OLD, NEW, {NEW_WEIGHTS: W1H0})
    assert e.basis.startswith("measured in order") and e.interaction is None
    assert e.weights == [0.5, 0.0, 0.0] and e.harness == [0.5, 0.5, 0.0]
    assert measured_effects(point(0, "w0", "c0"), point(1, "w2", "c3"), OLD, NEW, {}) is None


def test_when_one_side_changed_the_whole_change_is_its_own_and_the_other_gets_exactly_zero():
    weights = measured_effects(point(0, "w0", "c0"), point(1, "w1", "c0"), OLD, NEW, {})
    assert weights.weights == [1.0, 0.5, 0.0] and weights.harness == [0.0, 0.0, 0.0]
    harness = measured_effects(point(0, "w1", "c0"), point(1, "w1", "c2"), OLD, NEW, {})
    assert harness.harness == [1.0, 0.5, 0.0] and harness.weights == [0.0, 0.0, 0.0]
    same = measured_effects(point(0, "w1", "c2"), point(1, "w1", "c2"), OLD, OLD, {})
    assert same.basis == "nothing changed" and same.weights == same.harness == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="val tasks differ"):
        measured_effects(point(0, "w0", "c0"), point(1, "w1", "c0"), OLD, {"a": 1.0}, {})


def test_auto_turns_the_cross_evaluation_on_only_when_it_costs_at_most_one_evaluation():
    assert cross_on("auto", {"val": 24, "test": 40}) and cross_on("auto", {"val": 6, "test": 6})
    assert not cross_on("auto", {"val": 32, "test": 16})
    assert cross_on("on", {"val": 32, "test": 16}) and not cross_on("off", {"val": 6, "test": 6})


def test_totals_sum_each_task_over_intervals_and_the_verdict_rests_on_the_paired_interval():
    tasks = [f"t{i}" for i in range(20)]
    effects = {"basis": "measured: only the weights changed", "from_point": 0, "tasks": tasks,
               "weights": [0.5] * 10 + [0.25] * 10, "harness": [0.0] * 20, "interaction": None}  # fmt: skip
    noise = {"basis": "measured: only the harness changed", "from_point": 1, "tasks": tasks,
             "weights": [0.0] * 20, "harness": [0.25, -0.25] * 10, "interaction": None}  # fmt: skip
    points = [{"point": 0}, {"point": 1, "effects": effects}, {"point": 2, "effects": noise}, {"point": 3}]
    assert [m is None for m in measured_intervals(points)] == [False, False, True]
    totals = measured_totals(points)
    assert (totals.measured, totals.intervals) == (2, 3)
    assert totals.weights.mean == pytest.approx(0.375) and totals.weights.excludes_zero
    assert totals.harness.mean == pytest.approx(0.0) and not totals.harness.excludes_zero
    verdict = measured_verdict(totals, 8)
    assert verdict.startswith("The weights carried the run")
    assert "1 of 3 intervals were not measured" in verdict
    flat = {**effects, "weights": [0.25, -0.25] * 10}
    even = measured_totals([{"point": 0}, {"point": 1, "effects": flat}])
    assert measured_verdict(even, 8).startswith("Inconclusive")


class Always:
    """Accepts the first challenger it scores: both sides change in the run below."""

    name = "always"

    def judge(self, trial: Trial, challengers: list, incumbent: CandidateEval) -> Verdict:
        evals = evaluate_all(trial, challengers[:1])
        return Verdict(evals[0].candidate_id, "always", {}, evals[0].rollouts) if evals else Verdict(None, "")


def run_whale(tmp_path, monkeypatch, cross: str):
    monkeypatch.setattr("whale.search.search_step.build_acceptance", lambda kind, alpha: Always())
    cfg = load_config("tiny", None, [
        "schedule.method=whale", "schedule.budget_rollouts=64", "eval.every_rollouts=64", "eval.k=2",
        "runner.workers=4", "domain.sizes={train: 50, search: 4, val: 4, test: 2}", "proposer.kind=mutation",
        f"eval.cross={cross}",
    ])  # fmt: skip
    out = tmp_path / cross
    Experiment(cfg, out, Console(file=io.StringIO())).run()
    return cfg, out


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    monkeypatch = pytest.MonkeyPatch()
    try:
        base = tmp_path_factory.mktemp("cross")
        return run_whale(base, monkeypatch, "on"), run_whale(base, monkeypatch, "off")
    finally:
        monkeypatch.undo()


def test_a_run_whose_weights_and_harness_both_changed_measures_each_on_the_mixed_agents(two_runs):
    (cfg, out), _ = two_runs
    points, run = read_jsonl(out / "evals.jsonl"), RunDir(out)
    start, end = points[0], points[-1]
    assert start["weights"] != end["weights"] and start["harness"] != end["harness"], "both sides must change"
    assert end["effects"]["basis"] == "measured: 2x2" and end["effects"]["from_point"] == start["point"]
    new_weights, new_harness = (run.eval_rows(end["point"], name) for name in (NEW_WEIGHTS, NEW_HARNESS))
    served = [{(r["weights_version"], r["harness_id"]) for r in rows} for rows in (new_weights, new_harness)]
    assert served == [{(end["weights"], start["harness"])}, {(start["weights"], end["harness"])}]
    assert len(new_weights) == len(new_harness) == 4 * cfg.eval.k
    corners = {NEW_WEIGHTS: val_means(new_weights), NEW_HARNESS: val_means(new_harness)}
    old, new = val_means(run.eval_rows(0, "val")), val_means(run.eval_rows(end["point"], "val"))
    effects = end["effects"]
    for i, task in enumerate(effects["tasks"]):
        assert effects["weights"][i] + effects["harness"][i] == pytest.approx(new[task] - old[task])
        inter = new[task] - corners[NEW_WEIGHTS][task] - corners[NEW_HARNESS][task] + old[task]
        assert effects["interaction"][i] == pytest.approx(inter)
    state = read_json(out / "state.json")
    points_rollouts = sum((4 + 2) * cfg.eval.k for _ in points)
    assert state["budget"]["eval_rollouts"] == points_rollouts + 2 * 4 * cfg.eval.k  # corners cost evaluation


def test_the_cross_evaluation_changes_nothing_else_in_the_run(two_runs):
    """The old weights are swapped in for one evaluation and back bit for bit: training, search and the
    points themselves are those of the same run without it, which can only apportion the change."""
    (_, on), (_, off) = two_runs
    fields = ("task_id", "harness_id", "weights_version", "sample", "answer", "reward")
    rows = [read_jsonl(run / "rollouts/train.jsonl") for run in (on, off)]
    trained = [[tuple(r[f] for f in fields) for r in run_rows] for run_rows in rows]
    assert trained[0] == trained[1]
    points = [
        [{k: v for k, v in p.items() if k not in NOT_COMPARED} for p in read_jsonl(run / EVALS)]
        for run in (on, off)
    ]
    assert points[0] == points[1]
    assert "effects" not in read_jsonl(off / "evals.jsonl")[-1]
    assert not RunDir(off).eval_file(1, NEW_WEIGHTS).exists()


def test_a_resumed_run_reads_the_old_weights_back_from_the_last_points_checkpoint(two_runs):
    (cfg, out), _ = two_runs
    resumed = Experiment(cfg, out, Console(file=io.StringIO()), resume=True)
    try:
        start, end = read_jsonl(out / "evals.jsonl")
        fresh = resumed.cross._old_weights(start)  # the base model: the weights before the checkpoint loads
        assert fresh is resumed.cross.base and fresh is not None
        current = resumed.trainer.trainable_state()
        assert any(not torch.equal(fresh[n], current[n]) for n in current)
        assert end["checkpoint"], "the end point names its checkpoint"
        loaded = resumed.cross._old_weights(end)
        assert all(torch.equal(loaded[n], current[n]) for n in current)
    finally:
        resumed.runner.close()
        resumed.dir.release()
