"""A candidate's score on search tasks: per-task means, cost and failures, kept in the archive."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from whale.core.stats import task_means
from whale.core.timing import unit
from whale.harness.calls import RolloutJob
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.task import Task
from whale.rollout.executor import Executor
from whale.search.archive import Archive, CandidateEval
from whale.search.diagnosis import diagnose


def summarize(
    candidate_id: str,
    weights_version: str,
    rollouts: list[Rollout],
    inputs: dict[str, dict[str, Any]] | None = None,
) -> CandidateEval:
    """Per-task means, cost per rollout and the failures by kind (`inputs`: task id -> task inputs)."""
    per_task = task_means((r.task_id, r.reward) for r in rollouts)
    n = max(len(rollouts), 1)
    return CandidateEval(
        candidate_id=candidate_id,
        weights_version=weights_version,
        per_task=per_task,
        mean=sum(per_task.values()) / max(len(per_task), 1),
        tokens_per_rollout=sum(r.generated_tokens for r in rollouts) / n,
        calls_per_rollout=sum(len(r.calls) for r in rollouts) / n,
        errors=sum(r.error is not None for r in rollouts),
        rollouts=len(rollouts),
        failures=diagnose(rollouts, inputs),
    )


@unit("search iterations")  # also the incumbent's re-score after a weight step
def evaluate_candidate(
    runner: Executor,
    archive: Archive,
    candidate: HarnessCandidate,
    tasks: list[Task],
    rollouts_per_task: int,
    on_done: Callable[[Rollout], None] | None = None,
) -> tuple[CandidateEval, list[Rollout]]:
    jobs = [RolloutJob(t, candidate, s) for t in tasks for s in range(rollouts_per_task)]
    rollouts = runner.run(jobs, on_done)
    ev = summarize(candidate.id, runner.weights_version, rollouts, {t.id: t.inputs for t in tasks})
    archive.record_eval(ev, rollouts)
    return ev, rollouts
