"""Rescue of zero-signal tasks (whale/weights/rescue.py): which tasks, which jobs, how a distilled example
is built and when it is skipped; a real weight step on the tiny model in both modes; a real tiny
weight-only run whose rescue harnesses the program proposer writes."""

from __future__ import annotations

import copy
import io
import random
from collections import Counter
from functools import partial
from pathlib import Path

import pytest
from rich.console import Console

from tests.cli.test_cli import check_complete_run, run_in_background, whale
from tests.fixtures.rescue_domain import RESCUER, RescueDomain
from whale.core.config import ConfigError, load_config
from whale.core.files import read_json, read_jsonl
from whale.core.progress import track
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.runner import RolloutRunner
from whale.harness.task import Task
from whale.model.engine import SamplingParams
from whale.model.hf_engine import HFEngine
from whale.model.losses import Objective
from whale.model.trainer import Trainer, TrainerConfig, TrainExample
from whale.search.archive import Archive
from whale.weights.rescue import (
    RescueSettings,
    plan_rescue,
    rescue_jobs,
    rescue_report,
    zero_signal,
)
from whale.weights.weight_step import WeightBatch, WeightSettings, merged, weight_step

RESCUE_DOMAIN = Path(__file__).resolve().parents[1] / "fixtures" / "rescue_domain.py"
BARS = partial(track, Console(file=io.StringIO()))


def rollout(task, sample, reward, harness="c0", answer=None, calls=()) -> Rollout:
    return Rollout(task, harness, "w0", sample, answer=answer, reward=reward, calls=list(calls))


def test_zero_signal_tasks_are_those_with_no_passing_rollout():
    rollouts = [rollout("a", 0, 0.0), rollout("b", 0, 1.0), rollout("a", 1, 0.0), rollout("b", 1, 0.0)]
    rollouts.append(Rollout("c", "c0", "w0", 0, reward=1.0, error="crash"))  # an error never passes
    assert zero_signal(rollouts, 1.0) == ["a", "c"]


def test_rescue_jobs_skip_the_tasks_own_harness_and_stop_at_whole_tasks_within_the_budget():
    tasks = [Task("a", {}, {}), Task("b", {}, {}), Task("c", {}, {})]
    pool = [HarnessCandidate(cid, "") for cid in ("c0", "c1", "c2", "c3")]
    settings = RescueSettings("distill", harnesses=2, k=3)
    jobs = rescue_jobs(tasks, {"a": "c0", "b": "c1", "c": "c0"}, pool, settings, "s", False, 100)
    assert [(j.task.id, j.harness.id) for j in jobs[:6]] == [("a", "c1")] * 3 + [("a", "c2")] * 3
    assert {j.harness.id for j in jobs if j.task.id == "b"} == {"c0", "c2"}
    assert [j.sample for j in jobs[:3]] == [0, 1, 2] and len(jobs) == 18
    cut = rescue_jobs(tasks, {"a": "c0", "b": "c1", "c": "c0"}, pool, settings, "s", False, 13)
    assert len(cut) == 12 and {j.task.id for j in cut} == {"a", "b"}  # c would need 6 more


def test_the_pool_is_asked_only_when_a_task_can_be_rescued():
    tasks = [Task("a", {}, {}), Task("b", {}, {})]
    asked: list[list[str]] = []

    def pool(failed: list[Rollout]) -> list[HarnessCandidate]:
        asked.append([r.task_id for r in failed])
        return [HarnessCandidate("c1", "")]

    settings = RescueSettings("on_policy", harnesses=1, k=2)
    passing = [rollout("a", 0, 1.0), rollout("b", 0, 1.0)]
    assert plan_rescue(passing, tasks, pool, settings, 1.0, "s", False, 100) == ([], [])
    failing = [rollout("a", 0, 1.0), rollout("b", 0, 0.0), rollout("b", 1, 0.0)]
    assert plan_rescue(failing, tasks, pool, settings, 1.0, "s", False, 1) == (["b"], [])  # no budget
    assert asked == []
    zero, jobs = plan_rescue(failing, tasks, pool, settings, 1.0, "s", True, 100)
    assert zero == ["b"] and asked == [["b", "b"]]
    assert [(j.task.id, j.harness.id, j.sample, j.salt, j.logprobs) for j in jobs] == [
        ("b", "c1", 0, "s", True), ("b", "c1", 1, "s", True),
    ]  # fmt: skip


def test_a_rescue_report_counts_tasks_rescued_per_harness():
    rescue = [rollout("a", s, 1.0, "c1") for s in range(3)] + [rollout("b", 0, 0.0, "c1")]
    rescue.append(rollout("b", 1, 1.0, "c2"))
    report = rescue_report("distill", ["a", "b", "c"], rescue, 1.0, 2, Counter({"no call": 1}))
    assert (report.zero_signal, report.tried, report.rescued, report.rollouts) == (3, 2, 2, 5)
    assert report.by_harness == {"c1": 1, "c2": 1} and report.skipped == {"no call": 1}


def test_merged_batches_keep_dpo_pairs_apart():
    def pair(p: int) -> list[TrainExample]:
        return [TrainExample([1], [1], pair=p, chosen=True), TrainExample([1], [1], pair=p, chosen=False)]

    a = WeightBatch(pair(0) + pair(1), 4, by_harness={"c0": 4})
    b = WeightBatch(pair(0), 2, by_harness={"c1": 2})
    both = merged(a, b)
    assert [e.pair for e in both.examples] == [0, 0, 1, 1, 2, 2]
    assert both.kept == 6 and both.by_harness == {"c0": 4, "c1": 2}


def test_distill_is_refused_for_grpo_and_dpo_in_one_line():
    for algorithm in ("grpo", "dpo"):
        with pytest.raises(ConfigError, match="rescue=distill is built for algorithm=rft") as err:
            load_config("tiny", overrides=[f"weights.algorithm={algorithm}", "weights.rescue=distill"])
        assert "\n" not in str(err.value)
    assert load_config("tiny", overrides=["weights.algorithm=grpo", "weights.rescue=on_policy"])


@pytest.mark.parametrize("mode,algorithm", [("distill", "rft"), ("on_policy", "rft"), ("on_policy", "grpo")])
def test_a_weight_step_rescues_zero_signal_tasks_under_another_harness(tiny, mode, algorithm):
    model, tokenizer = copy.deepcopy(tiny[0]), tiny[1]
    domain = RescueDomain({"train": 6})
    trainer = Trainer(model, tokenizer.eos_token_id, TrainerConfig(lora=True, lora_r=4, lr=1e-3), seed=0)
    runner = RolloutRunner(HFEngine(model, tokenizer), domain, SamplingParams(max_tokens=8), seed=1)
    seed, rescuer = HarnessCandidate("c0", domain.seed_harness()), HarnessCandidate("c1", RESCUER)
    settings = WeightSettings(
        algorithm, 3, 4, 1.0, 8, False, True, Objective("sft" if algorithm == "rft" else "grpo"),
        RescueSettings(mode, harnesses=2, k=4),
    )  # fmt: skip
    heard, asked = [], []

    def pool(failed: list[Rollout]) -> list[HarnessCandidate]:
        asked.append(sorted({r.task_id for r in failed}))
        return [seed, rescuer]  # the task's own harness is never a rescue harness

    try:
        result = weight_step(
            runner, trainer, [seed], domain.splits()["train"], settings, random.Random(0), "s",
            BARS, "step", pool, budget=100, before_spending=heard.append,
        )  # fmt: skip
    finally:
        runner.close()
    main = [r for r in result.rollouts if r.rescue is None]
    rescue = [r for r in result.rollouts if r.rescue is not None]
    assert len(main) == 12 and result.train_reward == 0.0  # the seed never passes: all 3 tasks
    assert asked == [sorted({r.task_id for r in main})]
    assert len(rescue) == 3 * 4 and {r.harness_id for r in rescue} == {"c1"}
    assert heard == [len(main) + len(rescue)]  # announced before it trained
    assert {r.task_id for r in rescue} <= {t.id for t in domain.splits()["train"]}
    report = result.rescue
    passing = [r for r in rescue if r.reward >= 1.0]
    assert (report.zero_signal, report.tried, report.rescued) == (3, 3, len({r.task_id for r in passing}))
    assert passing, "the rescuer passes about half its rollouts under the tiny model"
    for r in rescue:
        assert r.rescue["for"] == "c0" and r.rescue["mode"] == mode
        trained = r in passing and mode == "on_policy" or (mode == "on_policy" and algorithm == "grpo")
        assert r.rescue["trained"] == trained
        if algorithm == "grpo":
            assert r.calls[0].logprobs is not None
    if mode == "distill":  # the seed appends " #" to any reply: no target can make it pass, none is kept
        assert report.skipped == {"no target": len(passing)} and report.replays > 0
        assert report.examples == result.examples == result.optimizer_steps == 0
    else:
        assert result.optimizer_steps > 0
    if algorithm == "rft":  # the seed's rollouts all failed: every example is a rescued one
        assert result.by_harness == ({"c1": result.examples} if result.examples else {})
        assert report.examples == result.examples
    else:  # grpo trains every rollout, the seed's all-fail group with advantage 0
        assert result.by_harness == {"c0": len(main), "c1": report.examples} == {"c0": 12, "c1": 12}
    cut = weight_step(
        RolloutRunner(HFEngine(model, tokenizer), domain, SamplingParams(max_tokens=8), seed=1),
        trainer, [seed], domain.splits()["train"], settings, random.Random(0), "s",
        BARS, "step", pool, budget=12 + 4 + 3,
    )  # fmt: skip
    assert cut.rescue.tried == 1 and cut.rescue.rollouts == 4 and len(cut.rollouts) == 16


@pytest.mark.slow
def test_a_weight_only_run_rescues_under_harnesses_the_program_proposer_wrote(tmp_path):
    out = tmp_path / "run"
    sets = ["schedule.method=weight-only", "weights.rescue=on_policy", "weights.rescue_harnesses=8",
            "rft.reward_threshold=1.0", "schedule.budget_rollouts=80"]  # fmt: skip
    proc = whale("run", "--preset", "tiny", "--domain-file", str(RESCUE_DOMAIN), "--out", str(out),
                 *[a for s in sets for a in ("--set", s)])  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [e for e in read_jsonl(out / "events.jsonl") if e["event"] == "weight_step"]
    rows = read_jsonl(out / "rollouts/train.jsonl")
    rescue = [r for r in rows if "rescue" in r]
    assert sum(e["rescue"]["rollouts"] for e in steps) == len(rescue) > 0
    charged = read_json(out / "state.json")["budget"]["train_rollouts"]
    assert sum(e["total"] for e in steps) == len(rows) == charged
    assert all(r["task_id"].startswith("train-") for r in rescue)  # never a val or test task
    assert any(e["rescue"]["rescued"] for e in steps) and any(r["rescue"]["trained"] for r in rescue)
    assert all(r["rescue"]["trained"] == (r["reward"] >= 1.0) for r in rescue)
    archive = Archive(out / "search")
    written = [cid for cid in archive.ids() if archive.meta(cid)["status"] == "rescue"]
    assert written and all(archive.meta(cid)["parent"] == "c0000" for cid in written)
    assert {r["harness_id"] for r in rescue} <= set(written)
    assert archive.searched_ids() == ["c0000"] and set(archive.fingerprints().values()) == {"c0000"}
    assert "zero-signal tasks" in (out / "report.html").read_text()
    assert "rescued" in proc.stdout


@pytest.mark.slow
def test_a_killed_rescue_run_resumes_without_losing_or_double_counting(tmp_path):
    out = tmp_path / "run"
    # five weight steps: the kill lands after the second, while a later one runs (with fewer, a loaded
    # machine can miss the window: here distill finds no target, so its steps take no optimizer step)
    sets = (
        f"domain.file={RESCUE_DOMAIN}", "schedule.method=weight-only", "weights.rescue=distill",
        "weights.rescue_harnesses=8", "rft.reward_threshold=1.0", "schedule.budget_rollouts=400",
    )  # fmt: skip
    with run_in_background(out, *sets):
        pass
    resumed = whale("run", "--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    state = check_complete_run(out)
    steps = [e for e in read_jsonl(out / "events.jsonl") if e["event"] == "weight_step"]
    rows = read_jsonl(out / "rollouts/train.jsonl")
    assert sum(e["total"] for e in steps) == len(rows) == state["budget"]["train_rollouts"]
    assert sum(e["rescue"]["rollouts"] for e in steps) == sum("rescue" in r for r in rows)
    archive = Archive(out / "search")
    written = [archive.load(cid).source for cid in archive.ids() if archive.meta(cid)["status"] == "rescue"]
    assert written and len(set(written)) == len(written)  # written once, not again after the resume
