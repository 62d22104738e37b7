"""`whale.bench.end_to_end`: a run's wall time split by kind of unit and by part, from the run's own records;
and one real `whale run` timed through it."""

from __future__ import annotations

import json
import os

import pytest

from tests.cli.test_cli import whale
from whale.bench.end_to_end import PARTS, bench_end_to_end, one_run, split_wall, variant_sets


def test_the_split_adds_up_to_the_wall_and_puts_each_part_where_it_ran(compared) -> None:
    run = compared[0] / "whale" / "seed0"
    end = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()][-1]
    assert end["event"] == "end"
    wall = end["wall_s"] + 5.0  # as if the process took 5 s to start and stop
    split = split_wall(run, wall)
    assert sum(entry["wall_s"] for entry in split.values()) == pytest.approx(wall)
    assert split["start-up and shutdown"]["wall_s"] == pytest.approx(5.0, abs=0.01)
    assert 0 <= split["between units"]["wall_s"] < 0.2 * end["wall_s"]
    steps, search, evals = split["weight steps"], split["search iterations"], split["evaluations"]
    budget = json.loads((run / "state.json").read_text())["budget"]
    assert steps["rollouts"] == budget["train_rollouts"] and search["rollouts"] == budget["search_rollouts"]
    assert evals["rollouts"] == 0 and evals["rollouts_per_s"] is None  # evaluations spend no budget
    assert steps["trainer"] > 0 and search["trainer"] == 0 and evals["trainer"] == 0
    for entry in (steps, search, evals):
        assert entry["engine"] > 0 and entry["sandbox and tools"] > 0
        assert entry["other"] > -0.01  # the parts fit in the unit they were measured in
    assert steps["rollouts_per_s"] == pytest.approx(steps["rollouts"] / steps["wall_s"])
    assert set(PARTS) <= set(steps)


def test_one_timed_run_per_kind_with_its_test_scores(tmp_path) -> None:
    out = tmp_path / "e2e.json"
    result = bench_end_to_end(
        ["hf"], out, preset="tiny", sets=("schedule.budget_rollouts=16",), log=lambda m: None
    )
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    (run,) = result["runs"]
    assert run["kind"] == "hf" and "hf" in run["compute"]["engine"]
    assert run["cores"] == sorted(os.sched_getaffinity(0))  # not pinned: the cores it inherited
    spent = run["parts"]["weight steps"]["rollouts"] + run["parts"]["search iterations"]["rollouts"]
    assert run["budget_rollouts"] >= 16 and spent == run["budget_rollouts"] == run["test"][-1][0]
    assert run["wall_s"] > run["parts"]["start-up and shutdown"]["wall_s"] > 0
    assert result["commit"] and result["cpu_flags"] is not None


def test_a_pinned_run_runs_on_its_cores_with_as_many_torch_threads(tmp_path) -> None:
    core = min(os.sched_getaffinity(0))
    run = one_run("fast", "tiny", ["schedule.budget_rollouts=16"], tmp_path / "run", cores=frozenset({core}))
    assert run["cores"] == [core] and "1 torch threads" in run["compute"]["engine"]


def test_an_unknown_engine_kind_is_one_line() -> None:
    proc = whale("bench", "--end-to-end", "fast,turbo")
    assert proc.returncode == 2 and "unknown engine kind 'turbo'" in proc.stderr
    proc = whale("bench", "--end-to-end", "fast:float16")
    assert proc.returncode == 2 and "unknown dtype 'float16'" in proc.stderr


def test_a_kind_with_a_dtype_sets_the_engine_and_the_trainer_to_it() -> None:
    assert variant_sets("fast") == ["engine.kind=fast"]
    assert variant_sets("vllm:bfloat16") == [
        "engine.kind=vllm",
        "engine.vllm.dtype=bfloat16",
        "weights.dtype=bfloat16",
    ]
    assert variant_sets("fast:bfloat16")[1] == "engine.dtype=bfloat16"
