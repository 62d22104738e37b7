"""Racing the challengers of one search iteration against the incumbent.

All challengers start on a small batch of search tasks; after each batch (a "look") every live one is
tested on its paired per-task differences to the incumbent, whose per-task scores under the current
weights are known for every search task:

  accept  the one-sided sign-flip test of "better" has p <= this look's share of alpha / challengers;
  drop    the test of "worse" has p <= `drop_p`, or acceptance can no longer be reached on the tasks left.

The first look at which any challenger passes ends the race; the best of those that pass (by mean
difference) is accepted. A race that runs out of tasks accepts nothing.

Why the false-acceptance rate is at most `alpha`: under "no difference" (the challenger's success
probability on every task equals the incumbent's, with or without common random numbers, for rewards in
{0, 1}), each task's difference is symmetric about zero, so the sign-flip p-value of every test is
valid (a Monte Carlo p-value (b + 1) / (B + 1) is conservative). alpha is split over the challengers
and the looks (`look_levels`: most of it on the last look, which has seen every task), so by the union
bound the chance that any test ever passes is at most alpha. Dropping a challenger only removes chances
to pass. `tests/search/test_race.py` measures the rate over simulated races.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

FLIPS = 20_000  # random sign patterns per test; the p-value's resolution is 1 / (FLIPS + 1)


@dataclass(frozen=True)
class RaceSettings:
    alpha: float = 0.05  # the family-wise false-acceptance rate of one race
    first_look: int = 4  # tasks in the first batch
    growth: float = 2.0  # each look sees this many times the tasks of the one before
    drop_p: float = 0.2  # drop a challenger whose "worse" test reaches this p-value
    flips: int = FLIPS  # random sign patterns per test
    early_share: float = 0.2  # of alpha, spent on the looks before the last (accepting early saves rollouts)


@dataclass
class RaceEntry:
    candidate_id: str
    per_task: dict[str, float] = field(default_factory=dict)  # task id -> challenger's mean reward
    status: str = "live"  # live, accepted, passed (passed the test, not the best), dropped, exhausted
    reason: str = ""
    p_better: float = 1.0
    mean_diff: float = 0.0


@dataclass
class RaceResult:
    entries: list[RaceEntry]
    accepted: str | None  # the winner's candidate id
    looks: int  # looks taken
    tasks_seen: int  # search tasks the race reached
    rollouts: int  # challenger rollouts it cost
    reason: str


def look_sizes(n_tasks: int, settings: RaceSettings) -> list[int]:
    """Cumulative task counts at each look: first_look, x growth, ..., all tasks."""
    sizes, size = [], max(1, min(settings.first_look, n_tasks))
    while size < n_tasks:
        sizes.append(size)
        size = max(size + 1, int(round(size * settings.growth)))
    return [*sizes, n_tasks]


def sign_flip_p(diffs: np.ndarray, rng: np.random.Generator, flips: int = FLIPS) -> float:
    """One-sided p-value of "the mean difference is above zero" by random sign flips (conservative)."""
    d = diffs[diffs != 0]
    if len(d) == 0:
        return 1.0
    observed = d.sum()
    signs = rng.choice(np.array([-1.0, 1.0]), size=(flips, len(d)))
    extreme = int(np.count_nonzero(signs @ d >= observed - 1e-12))
    return (extreme + 1) / (flips + 1)


def look_levels(sizes: list[int], challengers: int, alpha: float, early_share: float) -> list[float]:
    """Each look's test level. alpha is split evenly over the challengers; of each share, `early_share`
    goes to the looks before the last at which a pass is possible at all (n tasks cannot give p below
    2^-n), in proportion to their task counts, and the rest to the last look. The levels of one
    challenger sum to at most alpha / challengers."""
    share = alpha / max(1, challengers)
    early = [n for n in sizes[:-1] if 0.5**n <= share * early_share]
    total = sum(early)
    levels = [share * early_share * n / total if n in early else 0.0 for n in sizes[:-1]]
    return [*levels, share * (1 - early_share) if early else share]


def best_possible_p(diffs: np.ndarray, remaining: int) -> float:
    """The smallest p-value still reachable when every remaining task goes the challenger's way by the
    most it can (a difference of +1): with k nonzero differences all positive, p >= 2^-k."""
    nonzero_positive = int(np.count_nonzero(diffs > 0))
    if np.any(diffs < 0):
        return 0.0  # a mix of signs: do not try to bound it, keep racing
    return 0.5 ** (nonzero_positive + remaining)


def race(
    challengers: list[str],
    incumbent: dict[str, float],
    tasks: list[str],
    score: Callable[[list[str], list[str]], dict[str, dict[str, float]]],
    rollouts_per_task: int,
    settings: RaceSettings,
    seed: int = 0,
) -> RaceResult:
    """Race `challengers` on `tasks` (in this order) against the incumbent's per-task scores.
    `score(candidate_ids, task_ids)` runs the candidates on the tasks and returns their per-task scores."""
    rng = np.random.default_rng(seed)
    entries = [RaceEntry(cid) for cid in challengers]
    sizes = look_sizes(len(tasks), settings)
    levels = look_levels(sizes, len(challengers), settings.alpha, settings.early_share)
    seen, rollouts, looks = 0, 0, 0
    for size, level in zip(sizes, levels, strict=True):
        live = [e for e in entries if e.status == "live"]
        if not live:
            break
        batch = tasks[seen:size]
        scores = score([e.candidate_id for e in live], batch)
        rollouts += len(live) * len(batch) * rollouts_per_task
        seen, looks = size, looks + 1
        passed = []
        for e in live:
            e.per_task.update(scores[e.candidate_id])
            ids = list(e.per_task)
            diffs = np.array([e.per_task[t] - incumbent[t] for t in ids])
            e.mean_diff = float(diffs.mean())
            e.p_better = sign_flip_p(diffs, rng, settings.flips)
            p_worse = sign_flip_p(-diffs, rng, settings.flips)
            if e.p_better <= level:
                passed.append(e)
            elif p_worse <= settings.drop_p:
                e.status, e.reason = "dropped", f"worse (p {p_worse:.3f}) after {len(ids)} tasks"
            elif best_possible_p(diffs, len(tasks) - seen) > levels[-1]:
                e.status, e.reason = "dropped", f"cannot pass any more ({len(tasks) - seen} tasks left)"
        if passed:
            winner = max(passed, key=lambda e: e.mean_diff)
            for e in passed:
                e.status = "accepted" if e is winner else "passed"
                e.reason = f"p {e.p_better:.4f} <= {level:.4f} after {len(e.per_task)} tasks"
            reason = (
                f"{winner.candidate_id} accepted: mean diff {winner.mean_diff:+.4f}, sign-flip p "
                f"{winner.p_better:.4f} <= {level:.4f} (alpha {settings.alpha:g} over {len(challengers)} "
                f"challengers and the looks) after {seen} tasks, {rollouts} rollouts"
            )
            return RaceResult(entries, winner.candidate_id, looks, seen, rollouts, reason)
    for e in entries:
        if e.status == "live":
            e.status, e.reason = "exhausted", f"p {e.p_better:.4f} > {levels[-1]:.4f} on all {seen} tasks"
    reason = f"no challenger passed (last level {levels[-1]:.4f}) after {seen} tasks, {rollouts} rollouts"
    return RaceResult(entries, None, looks, seen, rollouts, reason)
