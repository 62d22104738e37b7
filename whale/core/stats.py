"""Evaluation statistics over a reward matrix (rows = tasks, columns = k samples per task).

Tasks, not samples, are the unit of resampling: samples of one task are correlated, so every interval here
is a bootstrap over tasks. A sample counts as a success for pass@k / maj@k when its reward is >= 1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

SUCCESS = 1.0 - 1e-9  # rewards at or above this count as a solved sample
_BOOT_CELLS = 4_000_000  # resampled indices held in memory at once


def rewards_by_task(pairs: Iterable[tuple[str, float]]) -> dict[str, list[float]]:
    """(task id, reward) pairs grouped by task, in order of first appearance."""
    by_task: dict[str, list[float]] = {}
    for task, reward in pairs:
        by_task.setdefault(task, []).append(reward)
    return by_task


def task_means(pairs: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Each task's mean reward: the per-task score every paired comparison is built on."""
    return {t: sum(v) / len(v) for t, v in rewards_by_task(pairs).items()}


def mean_at_k(rewards: list[list[float]]) -> float:
    """Average of per-task means, so tasks with more samples do not weigh more."""
    if not rewards or any(len(row) == 0 for row in rewards):
        raise ValueError("mean_at_k needs at least one task and one sample per task")
    return float(np.mean([np.mean(row) for row in rewards]))


def _boot_means(values: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """Means of n_boot resamples (with replacement) of values, in chunks to bound memory."""
    rng = np.random.default_rng(seed)
    n = len(values)
    chunk = max(1, _BOOT_CELLS // n)
    out = np.empty(n_boot)
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = values[idx].mean(axis=1)
    return out


def bootstrap_ci(
    per_task: list[float], n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Two-sided percentile bootstrap interval of the mean over tasks; deterministic for a seed."""
    if len(per_task) == 0:
        raise ValueError("bootstrap_ci needs at least one task")
    values = np.asarray(per_task, dtype=float)
    if np.all(values == values[0]):
        return float(values[0]), float(values[0])
    means = _boot_means(values, n_boot, seed)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k, 1 - C(n-c,k)/C(n,k), as a product so large n does not overflow."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def maj_at_k(answers: list[str | None], correct: list[bool]) -> float:
    """1.0 if the most common non-None answer is correct; ties go to the answer seen first."""
    if len(answers) != len(correct):
        raise ValueError(f"maj_at_k: {len(answers)} answers but {len(correct)} correctness flags")
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return 0.0
    top = max(counts.values())
    winner = next(a for a in answers if a is not None and counts[a] == top)
    return float(correct[answers.index(winner)])


@dataclass
class SplitScore:
    mean: float
    ci_low: float
    ci_high: float
    n_tasks: int
    k: int
    pass_at_k: float
    maj_at_k: float | None = None
    solved: float | None = None  # the share of samples that scored 1.0: below mean when rewards are partial


def score_split(
    rewards: list[list[float]], answers: list[list[str | None]] | None = None, seed: int = 0
) -> SplitScore:
    """Summarise one split: mean@k with a task-bootstrap CI, pass@k, and maj@k when answers are given.

    k is the smallest number of samples any task has, so pass@k is comparable across tasks.
    """
    if not rewards or any(len(row) == 0 for row in rewards):
        raise ValueError("score_split needs at least one task and one sample per task")
    if answers is not None and [len(a) for a in answers] != [len(r) for r in rewards]:
        raise ValueError("score_split: answers must have the same shape as rewards")
    per_task = [float(np.mean(row)) for row in rewards]
    lo, hi = bootstrap_ci(per_task, seed=seed)
    k = min(len(row) for row in rewards)
    solved = [[r >= SUCCESS for r in row] for row in rewards]
    pak = float(np.mean([pass_at_k(len(row), sum(row), k) for row in solved]))
    maj = None
    if answers is not None:
        maj = float(np.mean([maj_at_k(a, s) for a, s in zip(answers, solved, strict=True)]))
    return SplitScore(
        mean=mean_at_k(rewards),
        ci_low=lo,
        ci_high=hi,
        n_tasks=len(rewards),
        k=k,
        pass_at_k=pak,
        maj_at_k=maj,
        solved=float(np.mean([np.mean(row) for row in solved])),
    )


def paired_lcb(
    challenger: list[float], incumbent: list[float], alpha: float = 0.05, n_boot: int = 2000, seed: int = 0
) -> float:
    """One-sided (1-alpha) lower bound of mean(challenger - incumbent) by a paired bootstrap over tasks.

    Pairing cancels per-task difficulty, which dominates the variance of either score alone.
    """
    if len(challenger) != len(incumbent):
        raise ValueError(f"paired_lcb: {len(challenger)} challenger vs {len(incumbent)} incumbent tasks")
    if len(challenger) == 0:
        raise ValueError("paired_lcb needs at least one task")
    diffs = np.asarray(challenger, dtype=float) - np.asarray(incumbent, dtype=float)
    if np.all(diffs == diffs[0]):
        return float(diffs[0])
    return float(np.quantile(_boot_means(diffs, n_boot, seed), alpha))


@dataclass
class AcceptanceDecision:
    accepted: bool
    mean_diff: float
    lcb: float
    n_tasks: int
    reason: str


def decide_acceptance(
    challenger: list[float], incumbent: list[float], alpha: float = 0.05, seed: int = 0
) -> AcceptanceDecision:
    """Accept a challenger only when its paired improvement is bounded away from zero (LCB > 0)."""
    lcb = paired_lcb(challenger, incumbent, alpha=alpha, seed=seed)
    mean_diff = float(np.mean(np.asarray(challenger, dtype=float) - np.asarray(incumbent, dtype=float)))
    accepted = lcb > 0
    verdict, cmp = ("accepted", ">") if accepted else ("rejected", "<=")
    reason = (
        f"{verdict}: mean diff {mean_diff:+.4f}, {100 * (1 - alpha):g}% LCB {lcb:+.4f} {cmp} 0 "
        f"over {len(challenger)} tasks"
    )
    return AcceptanceDecision(
        accepted=accepted, mean_diff=mean_diff, lcb=lcb, n_tasks=len(challenger), reason=reason
    )


@dataclass
class PairedDifference:
    mean_diff: float  # mean over tasks of (a - b); over seeds of each seed's mean when seeds are resampled
    ci_low: float
    ci_high: float
    n_tasks: int
    p: float | None = None  # two-sided, from `test`; None when only the interval was computed
    test: str = ""
    per_seed: list[float] | None = None  # each seed's mean difference (whale/core/hierarchical.py)
    p_holm: float | None = None  # Holm-adjusted over the family of comparisons it was judged in


def paired_difference(
    a: list[float], b: list[float], alpha: float = 0.05, n_boot: int = 2000, seed: int = 0
) -> PairedDifference:
    """Two methods scored on the same tasks: mean of per-task differences with a paired bootstrap CI."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired_difference needs the same non-empty task list ({len(a)} vs {len(b)})")
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    lo, hi = bootstrap_ci(diffs, n_boot=n_boot, alpha=alpha, seed=seed)
    return PairedDifference(float(np.mean(diffs)), lo, hi, len(diffs))
