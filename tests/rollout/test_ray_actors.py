"""The Ray executor on a real local Ray (2 CPUs, 100 MB object store, started once by whale's own
`connect`): the same run as the local executor, a SIGKILLed actor retried without double counting, and
one-line errors for a bad executor config."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from rich.console import Console

from tests.cli.test_cli import assert_user_error, whale
from tests.processes import alive
from whale.core.config import ConfigError, ExecutorConfig, load_config
from whale.core.files import read_json, read_jsonl
from whale.domains.registry import build_domain
from whale.harness.calls import RolloutJob
from whale.harness.records import HarnessCandidate
from whale.model.backends import build_engine
from whale.model.distributed import build_trainer
from whale.rollout.build import build_executor
from whale.rollout.executor import build_runner
from whale.rollout.ray_actors import RayExecutor, connect
from whale.run.experiment import Experiment

pytestmark = pytest.mark.slow

STALL_DOMAIN = Path(__file__).resolve().parents[1] / "fixtures" / "stall_domain.py"
# The tiny preset, cut down: two weight steps of 8 rollouts (so weights are pushed to the actors twice),
# one search iteration, and evaluations at the start, after the weight steps and at the end.
TINY_RUN = [
    "schedule.budget_rollouts=26",  # 2 weight steps (16), re-scoring the seed (4), one challenger (1 + 4)
    "search.rollouts_per_task=1",
    "search.candidates_per_iter=1",
    "rft.tasks_per_step=2",
    "eval.every_rollouts=12",
    "eval.k=1",
    "domain.sizes={train: 50, search: 4, val: 4, test: 4}",
    "runner.workers=4",
]


@pytest.fixture(scope="module")
def ray_cluster() -> Any:
    started = connect(ExecutorConfig(kind="ray", num_cpus=2, object_store_mb=100))
    assert started and ray.is_initialized()
    assert ray.cluster_resources()["CPU"] == 2
    yield
    ray.shutdown()


def without_timing(value: Any) -> Any:
    """A record with its wall-clock fields dropped (the only fields two executors may differ in)."""
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k not in ("timings", "wall_s", "parts_s")}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def run_records(out: Path) -> dict[str, Any]:
    logs = ["rollouts/train.jsonl", "events.jsonl", "evals.jsonl"]
    logs += [str(p.relative_to(out)) for p in sorted(out.glob("evals/*/*.jsonl"))]
    logs += [str(p.relative_to(out)) for p in sorted(out.glob("search/candidates/*/traces/*.jsonl"))]
    records = {name: without_timing(read_jsonl(out / name)) for name in logs}
    del records["events.jsonl"][0]["config"]["executor"]  # the one setting the two runs differ in
    records["budget"] = without_timing(read_json(out / "state.json")["budget"])
    return records


def test_tiny_run_through_ray_matches_the_local_executor(ray_cluster, tmp_path):
    runs = {}
    for kind in ("local", "ray"):
        cfg = load_config("tiny", None, [*TINY_RUN, f"executor.kind={kind}"])
        Experiment(cfg, tmp_path / kind, Console(quiet=True)).run()
        runs[kind] = run_records(tmp_path / kind)
    local, remote = runs["local"], runs["ray"]
    assert local["budget"] == remote["budget"]
    assert local["budget"]["train_rollouts"] == 16 and local["budget"]["search_rollouts"] > 0
    assert local.keys() == remote.keys()
    assert len([n for n in local if "traces" in n]) >= 2  # candidates were evaluated through the executor
    for name in local:
        assert local[name] == remote[name], name
    train = remote["rollouts/train.jsonl"]
    assert {r["weights_version"] for r in train} == {"w0", "w1"}
    assert all(r["calls"] and r["calls"][0]["completion_ids"] for r in train)  # real generations
    final = remote["evals.jsonl"][-1]
    assert final["weights"] == "w2"  # the actors served the weights of the last step


def test_a_killed_actor_is_retried_without_double_counting(ray_cluster, tmp_path):
    marker = tmp_path / "stalled"
    cfg = load_config(
        "tiny",
        None,
        [
            f"domain.file={STALL_DOMAIN}",
            f"domain.options={{marker: '{marker}'}}",
            "domain.sizes={train: 6, search: 2, val: 2, test: 2}",
            "runner.workers=4",
            "executor.kind=ray",
        ],
    )
    trainer, tokenizer = build_trainer(cfg)
    domain = build_domain(cfg.domain)
    seed = HarnessCandidate("c0000", domain.seed_harness())
    jobs = [RolloutJob(t, seed, s, "step-0") for t in domain.splits()["train"] for s in range(2)]

    executor = build_executor(cfg, trainer.model, tokenizer, domain, trainer)
    assert isinstance(executor, RayExecutor)
    pids = executor.actor_pids()
    killed: list[int] = []

    def kill_the_stalled_actor() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = marker.read_text() if marker.exists() else ""
            if text.endswith("\n"):
                killed.append(int(text))
                os.kill(killed[0], signal.SIGKILL)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_stalled_actor)
    killer.start()
    done = []
    try:
        rollouts = executor.run(jobs, done.append)
        killer.join()
        after = executor.actor_pids()
    finally:
        executor.close()

    assert killed and killed[0] in pids and not alive(killed[0])  # an actor died in the middle of a rollout
    assert executor.retries == 1
    assert killed[0] not in after and len(after) == 2  # Ray restarted it
    assert len(rollouts) == len(done) == len(jobs)  # each job reported once, in job order
    assert [(r.task_id, r.sample) for r in rollouts] == [(j.task.id, j.sample) for j in jobs]
    assert sorted(id(r) for r in done) == sorted(id(r) for r in rollouts)
    assert all(r.error is None and r.reward == 1.0 for r in rollouts)

    local = build_runner(cfg, build_engine(cfg.engine, trainer.model, tokenizer, 64), domain)
    try:
        expected = local.run(jobs)  # the marker exists now: nothing stalls
    finally:
        local.close()
    assert without_timing([r.to_json() for r in rollouts]) == without_timing([r.to_json() for r in expected])


def test_bad_executor_config_is_one_line(ray_cluster, tmp_path, monkeypatch):
    for sets, words in [
        (["executor.kind=spark"], "executor.kind"),
        (["executor.address=ray://head:10001"], "address is only used with kind ray"),
        (["executor.kind=ray", "executor.address=head node"], "address must be 'auto', 'host:port'"),
        (["executor.kind=ray", "executor.actors=0"], "executor.actors"),
    ]:
        with pytest.raises(ConfigError) as err:
            load_config("tiny", None, sets)
        assert words in str(err.value) and "\n" not in str(err.value)

    # Without Ray installed, choosing it says how to install it.
    cfg = load_config("tiny", None, ["executor.kind=ray"])
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.delitem(sys.modules, "whale.rollout.ray_actors")
    with pytest.raises(ConfigError, match=r"needs Ray: pip install 'whale\[ray\]'"):
        build_executor(cfg, None, None, None, None)

    # An address where no cluster answers: one line at once (Ray itself would retry for minutes), and no
    # run folder left behind.
    out = tmp_path / "run"
    proc = whale("run", "--preset", "tiny", "--set", "executor.kind=ray", "--set",
                 "executor.address=127.0.0.1:1", "--out", str(out))  # fmt: skip
    assert_user_error(proc, "executor.address 127.0.0.1:1: no Ray cluster answers there")
    assert not out.exists()
