"""The 2x2 cross-evaluation behind the measured bottleneck view.

Between two evaluation points the weights (w0 -> w1), the harness (h0 -> h1), or both change. When one
side changed, the val change between the points is that side's effect, measured. When both did, the two
mixed agents are scored on val as well: (w1, h0) under the weights served now, and (w0, h1) with the
previous point's weights swapped in for one evaluation. Per val task, each side's effect is the mean of
its two one-side changes (the Shapley split of a 2x2) and the interaction is what neither explains. The
four corners run on the same tasks with the same per-call seeds, so their differences are paired.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from whale.core.config import EvalConfig
from whale.core.stats import task_means
from whale.harness.records import Rollout
from whale.harness.task import Task
from whale.model.trainer import checkpoint_weights
from whale.run.evaluation import evaluate_split, journals
from whale.run.rundir import RunDir

NEW_WEIGHTS = "val_new_weights_old_harness"  # (w1, h0): the eval file of the corner, per point
NEW_HARNESS = "val_old_weights_new_harness"  # (w0, h1)


def cross_on(mode: str, sizes: dict[str, int]) -> bool:
    """`eval.cross`: on, off, or (auto) on when its two val corners cost at most one evaluation."""
    return mode == "on" or (mode == "auto" and 2 * sizes["val"] <= sizes["val"] + sizes["test"])


@dataclass(frozen=True)
class Effects:
    """Each side's val effect per task between point `from_point` and the point that holds this record."""

    basis: str
    from_point: int
    tasks: list[str]
    weights: list[float]
    harness: list[float]
    interaction: list[float] | None  # only from the full 2x2

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def val_means(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean reward per task of a point's (or a corner's) val rollouts."""
    return task_means((r["task_id"], float(r["reward"])) for r in rows)


def measured_effects(
    last: dict[str, Any],
    record: dict[str, Any],
    old: dict[str, float],
    new: dict[str, float],
    corners: dict[str, dict[str, float]],
) -> Effects | None:
    """The effects of the change from point `last` to `record` (val means per task `old`, `new`, and of
    the corners scored). None when both sides changed and no corner was scored: then the change can only
    be apportioned."""
    tasks = sorted(old)
    if sorted(new) != tasks or any(sorted(c) != tasks for c in corners.values()):
        raise ValueError(f"point {record['point']}: val tasks differ from point {last['point']}'s")
    weights_changed = last["weights"] != record["weights"]
    harness_changed = last["harness"] != record["harness"]
    change = [new[t] - old[t] for t in tasks]
    zero = [0.0] * len(tasks)
    point = last["point"]
    if not weights_changed and not harness_changed:
        return Effects("nothing changed", point, tasks, zero, zero, None)
    if not harness_changed:
        return Effects("measured: only the weights changed", point, tasks, change, zero, None)
    if not weights_changed:
        return Effects("measured: only the harness changed", point, tasks, zero, change, None)
    if NEW_WEIGHTS not in corners:
        return None
    w1h0 = corners[NEW_WEIGHTS]
    if NEW_HARNESS not in corners:
        weights = [w1h0[t] - old[t] for t in tasks]
        harness = [new[t] - w1h0[t] for t in tasks]
        return Effects("measured in order: weights, then harness", point, tasks, weights, harness, None)
    w0h1 = corners[NEW_HARNESS]
    weights = [((w1h0[t] - old[t]) + (new[t] - w0h1[t])) / 2 for t in tasks]
    harness = [((w0h1[t] - old[t]) + (new[t] - w1h0[t])) / 2 for t in tasks]
    interaction = [new[t] - w1h0[t] - w0h1[t] + old[t] for t in tasks]
    return Effects("measured: 2x2", point, tasks, weights, harness, interaction)


def cross_evaluator(
    settings: EvalConfig, splits: dict[str, list[Task]], bars: Any, resume: bool, **parts: Any
) -> CrossEvaluator:
    """A run's cross-evaluator. A resumed run keeps the weights it was built with (before its checkpoint
    loads): they are the base model's, the old weights of an interval that starts at a base-model point."""
    enabled = cross_on(settings.cross, {split: len(tasks) for split, tasks in splits.items()})
    base = parts["trainer"].trainable_state() if enabled and resume else None
    return CrossEvaluator(enabled, tasks=splits["val"], k=settings.k, bars=bars, base=base, **parts)


@dataclass
class CrossEvaluator:
    """Measures each evaluation point's effects against the previous point, scoring the two mixed corners
    when both sides changed. It keeps one copy of the trainable tensors: the weights of the last point
    (after a resume, read back from that point's checkpoint; `base`: the weights before any checkpoint)."""

    enabled: bool
    trainer: Any
    runner: Any
    archive: Any
    run: RunDir
    tasks: list[Task]
    k: int
    bars: Any
    base: dict[str, Any] | None = None
    held: tuple[str, dict[str, Any]] | None = None

    def remember(self, version: str) -> None:
        """The weights served at the point just taken are the next point's old weights."""
        if self.enabled and (self.held is None or self.held[0] != version):
            self.held = (version, {n: t.cpu() for n, t in self.trainer.trainable_state().items()})

    def measure(self, last: dict[str, Any], record: dict[str, Any], charge: Callable[[list[Rollout]], None]):
        """Sets `record["effects"]` (val rows of both points are on disk); corner rollouts are written
        beside the point's own and charged as evaluation."""
        means = {}
        for name, rollouts in self.corners(last, record).items():
            rows = [r.to_json() for r in rollouts]
            self.run.write_eval_rows(record["point"], name, rows)
            charge(rollouts)
            means[name] = val_means(rows)
        old, new = (val_means(self.run.eval_rows(p, "val")) for p in (last["point"], record["point"]))
        effects = measured_effects(last, record, old, new, means)
        if effects is not None:
            record["effects"] = effects.to_json()

    def corners(self, last: dict[str, Any], record: dict[str, Any]) -> dict[str, list[Rollout]]:
        both = last["weights"] != record["weights"] and last["harness"] != record["harness"]
        if not (self.enabled and both):
            return {}
        point = record["point"]
        out = {NEW_WEIGHTS: self._score(last["harness"], "new weights, old harness", point)}
        old = self._old_weights(last)
        if old is not None:
            now = self.runner.weights_version
            try:
                with self.trainer.holding(old):
                    self.runner.sync_weights(last["weights"], self.trainer)
                    out[NEW_HARNESS] = self._score(record["harness"], "old weights, new harness", point)
            finally:
                self.runner.sync_weights(now, self.trainer)
        return out

    def _score(self, harness_id: str, label: str, point: int) -> list[Rollout]:
        harness, label = self.archive.load(harness_id), f"val ({label})"
        journal = journals(self.run, point, self.trainer.trainable_tensors())(label)  # the weights served now
        return evaluate_split(self.runner, harness, self.tasks, self.k, self.bars, label, journal)

    def _old_weights(self, last: dict[str, Any]) -> dict[str, Any] | None:
        if self.held is not None and self.held[0] == last["weights"]:
            return self.held[1]
        if last.get("checkpoint") is None:
            return self.base
        folder = self.run.checkpoint(last["checkpoint"])
        return checkpoint_weights(self.trainer.model, folder) if folder.is_dir() else None
