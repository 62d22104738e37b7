"""`whale compare` end to end on the tiny model, plus its table arithmetic."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from tests.cli.test_cli import assert_user_error, check_complete_run, run_in_background, whale
from whale.core.config import ConfigError, load_config
from whale.core.files import read_json, read_jsonl
from whale.run.experiment import Experiment
from whale.studies.compare import method_config, parse_methods, pooled, rollouts_to_fraction

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SIX = "whale,whale-adaptive,weight-only,harness-only,stagewise,fast-slow"


def test_parse_methods():
    assert parse_methods(" whale, fast-slow ") == ["whale", "fast-slow"]
    for bad, words in (("whale,gepa", "'gepa'"), ("", "(none)"), ("whale,whale", "twice")):
        with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
            parse_methods(bad)


def test_rollouts_to_fraction_and_pooling():
    points = [
        {"rollouts": r, "test": {"mean": m}} for r, m in ((0, 0.1), (300, 0.5), (600, 0.97), (900, 1.0))
    ]
    assert rollouts_to_fraction(points) == 600
    assert rollouts_to_fraction(points, 0.5) == 300
    assert rollouts_to_fraction([{"rollouts": 0, "test": {"mean": 0.0}}]) is None
    assert pooled([{"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 0.5}]) == {"a": 0.5, "b": 0.25}
    with pytest.raises(ConfigError, match="different test tasks"):
        pooled([{"a": 1.0}, {"b": 1.0}])


def budget_from_events(out) -> tuple[int, int]:
    events = read_jsonl(out / "events.jsonl")
    train = sum(e["total"] for e in events if e["event"] == "weight_step")
    search = sum(e["spent"] for e in events if e["event"] in ("search_iteration", "reeval"))
    return train, search


@pytest.mark.slow
def test_compare_runs_every_method_on_one_budget_and_writes_table_and_plot(compared):
    out, stdout = compared
    assert (out / "compare.png").read_bytes()[:8] == PNG_MAGIC
    table = read_json(out / "compare.json")
    assert [r["method"] for r in table["rows"]] == SIX.split(",")
    markdown = (out / "compare.md").read_text()
    for method in SIX.split(","):
        assert f"| {method} |" in markdown and method in stdout
    repeats: dict[str, int] = {}
    for row in table["rows"]:
        folder = out / row["method"] / "seed0"
        state = check_complete_run(folder)
        b = state["budget"]
        spent = b["train_rollouts"] + b["search_rollouts"]
        assert 60 - 16 < spent <= 60  # every method spends the budget, less what fits no unit
        assert budget_from_events(folder) == (b["train_rollouts"], b["search_rollouts"])
        assert row["rollouts"] == b["train_rollouts"] + b["search_rollouts"]
        points = read_jsonl(folder / "evals.jsonl")
        assert [p["rollouts"] for p in points][0] == 0 and points[-1]["label"] == "end"
        for before, p in zip(points, points[1:], strict=False):  # unchanged agent: the point is copied
            unchanged = (p["weights"], p["harness"]) == (before["weights"], before["harness"])
            assert p.get("repeats") == (before["point"] if unchanged else None)
            if unchanged:
                assert p["test"] == before["test"]
                copied, source = (folder / "evals" / f"{q['point']:03d}" / "test.jsonl" for q in (p, before))
                assert copied.read_bytes() == source.read_bytes()
        repeats[row["method"]] = sum("repeats" in p for p in points)
        # one cadence for all: each point stands for the agent held at its multiple of 30, the end for 60
        assert [p["rollouts"] for p in points] == [0, 30, 60]
        events = read_jsonl(folder / "events.jsonl")
        kinds = [e["event"] for e in events]
        switches = [e for e in events if e["event"] == "phase_switch"]
        method = row["method"]
        if method == "weight-only":
            assert "search_iteration" not in kinds and not switches and state["incumbent"] == "c0000"
        if method == "harness-only":
            assert "weight_step" not in kinds and not switches and state["checkpoint"] is None
        if method == "stagewise":
            assert len(switches) == 1 and switches[0]["reason"] == "stage budget spent"
            assert switches[0]["signals"]["share"] >= 0.5
        if method in ("whale", "whale-adaptive"):
            assert switches and all(s["signals"] for s in switches)
        if method == "fast-slow":
            assert "population" in next(e for e in events if e["event"] == "search_iteration")
            steps = [e for e in events if e["event"] == "weight_step"]
            assert any(set(s["harnesses"]) - {"c0000"} for s in steps)  # weights trained under the population
        if row["method"] != "whale":
            assert row["vs_reference"] is not None
    assert sum(repeats.values()) > 0  # the check above is not vacuous: some agent went unchanged
    # the start evaluation is computed once (by the first method) and lent to the others of the seed
    lender = out / "whale" / "seed0"
    for method in SIX.split(",")[1:]:
        first = read_jsonl(out / method / "seed0" / "evals.jsonl")[0]
        # the path where the comparison ran (the fixture hands each xdist worker a copy of it)
        assert Path(first["reused_from"]).parts[-3:] == lender.parts[-3:] and first["label"] == "start"
        for split in ("val", "test"):
            copied = out / method / "seed0" / "evals" / "000" / f"{split}.jsonl"
            assert copied.read_bytes() == (lender / "evals" / "000" / f"{split}.jsonl").read_bytes()
    assert "reused_from" not in read_jsonl(lender / "evals.jsonl")[0]
    eval_costs = {r["method"]: r["eval_rollouts"] for r in table["rows"]}
    assert eval_costs["whale"] == eval_costs["whale-adaptive"]  # the lent evaluation is charged as usual
    # whale-adaptive logs the signal values behind each switch
    adaptive = [
        e for e in read_jsonl(out / "whale-adaptive/seed0/events.jsonl") if e["event"] == "phase_switch"
    ]
    assert all({"stale", "patience"} <= set(e["signals"]) for e in adaptive)


@pytest.mark.slow
def test_compare_reuses_finished_runs_and_refuses_a_changed_config(compared):
    out, _ = compared
    out = str(out)
    # a folder written before a config key existed (here: the whole `checkpoints` section) is still reused
    saved = Path(out) / "whale" / "seed0" / "config.yaml"
    data = yaml.safe_load(saved.read_text())
    del data["checkpoints"]
    saved.write_text(yaml.safe_dump(data))
    stamps = {m: os.stat(f"{out}/{m}/seed0/state.json").st_mtime_ns for m in SIX.split(",")}
    again = whale("compare", "--domain", "math", "--methods", SIX, "--preset", "tiny", "--out", out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("finished run reused") == 6
    assert {m: os.stat(f"{out}/{m}/seed0/state.json").st_mtime_ns for m in SIX.split(",")} == stamps
    changed = whale("compare", "--methods", "whale", "--preset", "tiny", "--set", "rft.k=3", "--out", out)
    assert_user_error(changed, "holds a run with a different config (rft.k)")


@pytest.mark.slow
def test_a_start_evaluation_is_lent_only_to_a_run_it_would_equal(compared, tmp_path):
    lender = compared[0] / "whale" / "seed0"
    base = load_config("tiny", None, ["domain=math"])
    same = method_config(base, "weight-only+grpo", 0)  # schedule and algorithm differ: the start does not
    assert Experiment(same, tmp_path / "a", start_eval_from=[lender]).start_eval_source() == lender
    for change in ("eval.k=3", "sampling.temperature=0.5", "seed=1"):
        other = load_config("tiny", None, ["domain=math", change])
        assert Experiment(other, tmp_path / change, start_eval_from=[lender]).start_eval_source() is None


COUNTS = ("unit", "weight_steps", "search_iters", "eval_points", "incumbent", "finished")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["whale-adaptive", "fast-slow", "harness-only"])
def test_killed_and_resumed_run_ends_with_the_same_counts_as_an_uninterrupted_one(compared, tmp_path, method):
    reference = read_json(compared[0] / method / "seed0" / "state.json")
    out = tmp_path / "run"
    with run_in_background(out, f"schedule.method={method}"):
        pass  # killed mid-unit on leaving
    resumed = whale("run", "--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    state = check_complete_run(out)
    assert {k: state[k] for k in COUNTS} == {k: reference[k] for k in COUNTS}
    for key in ("train_rollouts", "search_rollouts", "eval_rollouts"):
        assert state["budget"][key] == reference["budget"][key], key
    assert state["schedule"] == reference["schedule"]
    assert len(state["candidates"]) == len(reference["candidates"])
    assert budget_from_events(out) == (state["budget"]["train_rollouts"], state["budget"]["search_rollouts"])
    # same seed and config: the same tasks, in the same order, sampled with the same per-call seeds
    assert sampled(out / "rollouts/train.jsonl") == sampled(
        compared[0] / method / "seed0/rollouts/train.jsonl"
    )
    assert sampled(out / "evals/001/test.jsonl") == sampled(
        compared[0] / method / "seed0/evals/001/test.jsonl"
    )


def sampled(path) -> list[tuple]:
    return [
        (r["task_id"], r["sample"], tuple(c["params"]["seed"] for c in r["calls"])) for r in read_jsonl(path)
    ]
