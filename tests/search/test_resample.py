"""The harness-resample control: copies of the incumbent with their own random numbers. Simulated
through the real per-call seeds and the real race, a copy is accepted at most at the nominal rate, and
without its salt it could never be accepted at all; a real tiny run scores copies, never duplicates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.cli.test_cli import whale
from whale.core.files import read_jsonl
from whale.harness.calls import RolloutJob, call_seed
from whale.harness.records import HarnessCandidate
from whale.harness.task import Task
from whale.run.schedule import HARNESS, build_schedule, method_rules
from whale.search.archive import Archive
from whale.search.proposer import ProposalRequest
from whale.search.race import RaceSettings, race
from whale.search.resample import ResampleProposer

PARITY = Path(__file__).resolve().parents[1] / "fixtures" / "parity_domain.py"
TASKS = [Task(f"t{i}", {}, {}) for i in range(24)]
N = 2  # rollouts per task, as in the default preset


def copies(tmp_path, incumbent: HarnessCandidate, n: int) -> list[HarnessCandidate]:
    counter = iter(range(1, 10**6))
    request = ProposalRequest(Archive(tmp_path), [incumbent], n, lambda: f"c{next(counter):04d}", "w0", "", 0)
    return ResampleProposer().propose(request).candidates


def reward(job: RolloutJob, p: dict[str, float], seed: int) -> float:
    """A rollout that passes when its first call's random number falls under the task's rate: the
    outcome is a function of the seed the runner would give that call, as under a real engine."""
    return float(call_seed(seed, job, 0) / 2**63 < p[job.task.id])


def simulate(challengers: list[HarnessCandidate], incumbent: HarnessCandidate, seed: int) -> str | None:
    rng = np.random.default_rng(seed)
    p = {t.id: float(rng.uniform(0.05, 0.6)) for t in TASKS}
    by_id = {t.id: t for t in TASKS}

    def task_scores(h: HarnessCandidate, tasks: list[str], round_: int) -> dict[str, float]:
        samples = range(round_ * N, (round_ + 1) * N)
        return {t: np.mean([reward(RolloutJob(by_id[t], h, s), p, seed) for s in samples]) for t in tasks}

    runs = {c.id: c for c in challengers} | {incumbent.id: incumbent}

    def score(ids: list[str], tasks: list[str], round_: int) -> dict[str, dict[str, float]]:
        return {cid: task_scores(runs[cid], tasks, round_) for cid in ids}

    base = task_scores(incumbent, [t.id for t in TASKS], 0)
    settings = RaceSettings(alpha=0.05, flips=1_000)
    order = [t.id for t in TASKS]
    return race([c.id for c in challengers], base, order, score, N, settings, seed, incumbent.id).accepted


def test_the_proposer_returns_salted_copies_of_the_incumbent(tmp_path):
    incumbent = HarnessCandidate("c0000", "def run(task, llm, tools):\n    return 'x'\n")
    made = copies(tmp_path, incumbent, 3)
    assert [c.source for c in made] == [incumbent.source] * 3
    assert len({c.salt for c in made}) == 3 and all(c.salt and c.parent == "c0000" for c in made)
    job = RolloutJob(TASKS[0], incumbent, 0)
    same = {call_seed(1, RolloutJob(TASKS[0], c, 0), 0) for c in made}
    assert call_seed(1, job, 0) not in same and len(same) == 3
    unsalted = HarnessCandidate("c0009", incumbent.source)
    assert call_seed(1, RolloutJob(TASKS[0], unsalted, 0), 0) == call_seed(1, job, 0)  # common numbers


def test_salted_copies_are_accepted_at_most_at_the_nominal_rate_and_unsalted_ones_never(tmp_path):
    incumbent = HarnessCandidate("c0000", "def run(task, llm, tools):\n    return 'x'\n")
    races, accepted, unsalted = 400, 0, 0
    for seed in range(races):
        made = copies(tmp_path, incumbent, 2)
        accepted += simulate(made, incumbent, seed) is not None
        if seed < 50:
            plain = [HarnessCandidate(c.id, c.source, c.parent) for c in made]
            unsalted += simulate(plain, incumbent, seed) is not None
    assert accepted / races <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / races), accepted
    assert unsalted == 0  # identical rollouts: a zero difference is never significant


def test_the_method_is_harness_only_with_the_resample_proposer():
    rules = method_rules("harness-resample")
    assert rules.resample and not rules.trains and rules.ends_with_proposer
    from whale.core.config import ScheduleConfig

    assert build_schedule(ScheduleConfig(method="harness-resample")).initial().kind == HARNESS


@pytest.mark.slow
def test_a_tiny_harness_resample_run_scores_copies_never_duplicates(tmp_path):
    out = tmp_path / "run"
    sets = ("--set", "schedule.method=harness-resample", "--set", "rft.reward_threshold=1.0")
    proc = whale("run", "--preset", "tiny", "--domain-file", str(PARITY), "--out", str(out), *sets)
    assert proc.returncode == 0, proc.stderr[-3000:]
    archive = Archive(out / "search")
    made = [cid for cid in archive.ids() if archive.meta(cid)["proposer"] == "resample"]
    assert made and all(archive.meta(cid)["status"] not in ("duplicate", "invalid") for cid in made)
    assert all(archive.load(cid).source == archive.load("c0000").source for cid in made)
    scored = [cid for cid in made if archive.eval_history(cid)]
    assert scored

    def replies(cid: str) -> dict[tuple[str, int], list[int]]:
        return {
            (r["task_id"], r["sample"]): r["calls"][0]["completion_ids"] for r in archive.traces(cid, "w0")
        }

    seed = replies("c0000")
    for cid in scored:  # its own random numbers: not the seed's replies on the same task and sample
        assert any(seed.get(key) != ids for key, ids in replies(cid).items())
    iterations = [e for e in read_jsonl(out / "events.jsonl") if e["event"] == "search_iteration"]
    assert iterations and not any(e["failed"] for e in iterations)
