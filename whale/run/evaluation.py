"""Evaluation points: the incumbent scored on val and test (mean@k with CIs, pass@k, maj@k), or a point
copied when it would only repeat one already taken (the previous point with the same weights and
harness, or a sibling run's identical start)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from whale.core.config import Config
from whale.core.files import append_jsonl, atomic_write_text, read_jsonl
from whale.core.progress import Bars
from whale.core.stats import SplitScore, score_split
from whale.core.timing import unit
from whale.harness.calls import RolloutJob
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.task import Task
from whale.rollout.executor import Executor
from whale.run.rundir import CONFIG, RunDir

SPLITS = ("val", "test")


def score_rollouts(rollouts: list[Rollout], tasks: list[Task]) -> SplitScore:
    """mean@k with CI, pass@k and maj@k over tasks, from rollouts grouped by task id."""
    by_task: dict[str, list[Rollout]] = {t.id: [] for t in tasks}
    for r in rollouts:
        by_task[r.task_id].append(r)
    rewards = [[r.reward for r in rs] for rs in by_task.values()]
    answers = [[r.answer for r in rs] for rs in by_task.values()]
    return score_split(rewards, answers)


def weights_digest(state: dict[str, Any]) -> str:
    """A digest of the trainable tensors: which weights an evaluation's rollouts were drawn under."""
    import torch

    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].detach().cpu().contiguous().view(torch.uint8).numpy())
    return digest.hexdigest()[:20]


@dataclass(frozen=True)
class Journal:
    """An evaluation's finished rollouts, appended as they come, so that a run killed in the middle of a
    long evaluation keeps them. The first line keys what was evaluated (weights digest, harness source, k):
    after a crash the unit before the point is redone, and its weights need not come out bit for bit the
    same, so rollouts under any other key are dropped."""

    path: Path
    weights: str  # weights_digest of the weights being evaluated

    def open(self, harness: HarnessCandidate, k: int) -> dict[tuple[str, int], Rollout]:
        """The rollouts already journaled under this key, by (task, sample); a fresh journal otherwise."""
        key = hashlib.sha256(f"{self.weights}\0{harness.source}\0{k}".encode()).hexdigest()[:20]
        rows = read_jsonl(self.path)
        if rows and rows[0] == {"key": key}:
            return {(r.task_id, r.sample): r for r in map(Rollout.from_json, rows[1:])}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps({"key": key}) + "\n")
        return {}

    def add(self, rollout: Rollout) -> None:
        append_jsonl(self.path, [rollout.to_json()])


def journals(run: RunDir, point: int, weights: dict[str, Any]) -> Callable[[str], Journal]:
    """The journal of each evaluation (by label) of `point` under `weights` (the trainable tensors)."""
    digest = weights_digest(weights)
    return lambda label: Journal(run.journal_file(point, label), digest)


def evaluate(
    runner: Executor,
    harness: HarnessCandidate,
    splits: dict[str, list[Task]],
    k: int,
    bars: Bars,
    journal: Callable[[str], Journal] | None = None,
) -> dict[str, tuple[list[Rollout], dict[str, Any]]]:
    """k rollouts of `harness` on every val and test task: the rollouts and the score of each split;
    `journal(split)`, where given, keeps each split's finished rollouts as they come."""
    journals_of = {split: journal(split) if journal else None for split in SPLITS}
    drawn = evaluate_splits(runner, harness, {s: splits[s] for s in SPLITS}, k, bars, journals_of)
    return {split: (drawn[split], asdict(score_rollouts(drawn[split], splits[split]))) for split in SPLITS}


def evaluate_split(
    runner: Executor,
    harness: HarnessCandidate,
    tasks: list[Task],
    k: int,
    bars: Bars,
    label: str,
    journal: Journal | None = None,
) -> list[Rollout]:
    """k rollouts of `harness` on each of `tasks` (samples 0..k-1, as at every evaluation point)."""
    return evaluate_splits(runner, harness, {label: tasks}, k, bars, {label: journal})[label]


@unit("evaluations")
def evaluate_splits(
    runner: Executor,
    harness: HarnessCandidate,
    tasks_of: dict[str, list[Task]],
    k: int,
    bars: Bars,
    journals_of: dict[str, Journal | None],
) -> dict[str, list[Rollout]]:
    """k rollouts of `harness` on each task of every split (samples 0..k-1), in one runner call with the
    splits' jobs interleaved in proportion: the engine's batch does not drain between splits, and each
    split's workers (a worker serves one split) stay busy with their own split's jobs, so about half as
    many start as with one call per split. Those a journal already holds are not drawn again."""
    jobs = {
        label: [RolloutJob(t, harness, s) for t in tasks for s in range(k)]
        for label, tasks in tasks_of.items()
    }
    held = {label: j.open(harness, k) if j else {} for label, j in journals_of.items()}
    todo = {label: [j for j in jobs[label] if (j.task.id, j.sample) not in held[label]] for label in jobs}
    order = interleaved([[(label, job) for job in todo[label]] for label in todo])
    total = sum(len(js) for js in jobs.values())
    labels_of: dict[tuple[str, int], list[str]] = {}  # a task in two splits runs (and is kept) twice
    for label, job in order:
        labels_of.setdefault((job.task.id, job.sample), []).append(label)
    with bars(f"evaluating {' and '.join(jobs)} mean@{k}", total) as tick:
        for _ in range(total - len(order)):
            tick()

        def finished(rollout: Rollout) -> None:
            journal = journals_of[labels_of[(rollout.task_id, rollout.sample)].pop()]
            if journal:
                journal.add(rollout)
            tick(rollout)

        fresh = runner.run([job for _, job in order], finished)
    for (label, job), rollout in zip(order, fresh, strict=True):
        held[label][(job.task.id, job.sample)] = rollout
    return {label: [held[label][(j.task.id, j.sample)] for j in js] for label, js in jobs.items()}


def interleaved(groups: list[list[Any]]) -> list[Any]:
    """The groups' items in one list, each group spread evenly over it in its own order."""
    keyed = [((i + 0.5) / len(g), n, i) for n, g in enumerate(groups) for i in range(len(g))]
    return [groups[n][i] for _, n, i in sorted(keyed)]


def copied_point(source: RunDir, point: int) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Evaluation point `point` of `source`: its record (without provenance) and its rollouts per split."""
    record = next(r for r in source.points() if r["point"] == point)
    record = {k: v for k, v in record.items() if k not in ("reused_from", "repeats", "effects")}
    return record, {split: source.eval_rows(point, split) for split in SPLITS}


def start_eval_key(cfg: Config) -> dict[str, Any]:
    """Everything that decides a run's start evaluation: the config without the schedule and the weight
    algorithm (what `whale compare` varies between methods); checkpoints and tracking do not score."""
    data = cfg.model_dump()
    for key in ("schedule", "checkpoints", "tracking"):
        data.pop(key, None)
    data["weights"].pop("algorithm", None)
    return data


def start_eval_source(cfg: Config, out: Path, seed_source: str, siblings: list[Path]) -> Path | None:
    """The first sibling run whose committed start evaluation this run would repeat: same config but for
    the schedule and the weight algorithm (so the same base weights, seed harness, tasks and per-call
    seeds). A comparison evaluates point 0 once per seed instead of once per method."""
    mine = start_eval_key(cfg)
    for folder in siblings:
        run = RunDir(folder)
        if folder.resolve() == out.resolve() or not run.is_run() or not (folder / CONFIG).is_file():
            continue
        if run.read_state().get("eval_points", 0) < 1:
            continue
        harness = run.harness_file("c0000")
        if (
            start_eval_key(run.load_config()) == mine
            and harness.is_file()
            and harness.read_text() == seed_source
        ):
            return folder
    return None


def eval_line(record: dict[str, Any], k: int, copied_from: str = "") -> str:
    """The console line of an evaluation point."""
    v, t = record["val"], record["test"]
    where = f"{record['label']}; {record['rollouts']} rollouts" + (
        f"; the same as {copied_from}" if copied_from else ""
    )
    if copied_from:
        scores = f"val mean@{k} {v['mean']:.3f}  test mean@{k} {t['mean']:.3f}"
        return f"[bold]eval {record['point']}[/bold] ({where}): {scores}"
    return (
        f"[bold]eval {record['point']}[/bold] ({where}): "
        f"val mean@{k} {v['mean']:.3f} [{v['ci_low']:.3f}, {v['ci_high']:.3f}]  "
        f"test mean@{k} {t['mean']:.3f} [{t['ci_low']:.3f}, {t['ci_high']:.3f}]"
    )


def points_between(next_at: int, every: int, end: int, limit: int, inclusive: bool) -> list[int]:
    """The evaluation points (every `every` rollouts from `next_at`) up to `end`, with or without `end`
    itself, and before `limit`, whose point is the run's end."""
    points = []
    while (next_at <= end if inclusive else next_at < end) and next_at < limit:
        points.append(next_at)
        next_at += every
    return points
