"""Racing the challengers of one search iteration against the incumbent.

All challengers start on a small batch of search tasks; after each batch (a "look") every live one is
tested on its paired per-task differences to the incumbent, whose per-task scores under the current
weights are known for every search task:

  accept  the one-sided sign-flip test of "better" has p <= this look's share of alpha / challengers;
  drop    the test of "worse" has p <= `drop_p`, or (without extensions, which re-score every task)
          acceptance can no longer be reached on the tasks left.

The first look at which any challenger passes ends the race; the best of those that pass (by mean
difference) is accepted. When the split runs out undecided, the promising challengers (ahead, with a
"better" p-value of at most `extend_p`) are extended: they and the incumbent get `extension_size` x
`rollouts_per_task` more rollouts on every task (fresh samples, the same number for both), and the test
is repeated on the per-task means of all samples, at its own share of alpha. A race that still finds no
winner accepts nothing. (With 16 search tasks, a challenger that differs from the incumbent on only 5 of
them cannot reach p < 2^-5 however large its gain; more samples per task make more differences visible.)

Why the false-acceptance rate is at most `alpha`: under "no difference" (the challenger's success
probability on every task equals the incumbent's, with or without common random numbers, for rewards in
{0, 1}), each task's difference is symmetric about zero, so the sign-flip p-value of every test is
valid (a Monte Carlo p-value (b + 1) / (B + 1) is conservative). alpha is split over the challengers
and the looks (`look_levels`: most of it on the last look, which has seen every task), so by the union
bound the chance that any test ever passes is at most alpha. Extensions take part of the last look's
share, and their per-task differences compare equal numbers of samples, so they stay symmetric too.
Dropping a challenger only removes chances to pass. `tests/search/test_race.py` measures the rate over
simulated races.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

FLIPS = 20_000  # random sign patterns per test; the p-value's resolution is 1 / (FLIPS + 1)

NO_DECISION = "no decision"  # how the reason of a race the budget cut short begins


@dataclass(frozen=True)
class RaceSettings:
    alpha: float = 0.05  # the family-wise false-acceptance rate of one race
    first_look: int = 4  # tasks in the first batch
    growth: float = 2.0  # each look sees this many times the tasks of the one before
    drop_p: float = 0.2  # drop a challenger whose "worse" test reaches this p-value (it is behind)
    flips: int = FLIPS  # random sign patterns per test
    early_share: float = 0.1  # of alpha, spent on the looks before the last (accepting early saves rollouts)
    extensions: int = 1  # tests on more samples per task for promising challengers once the tasks run out
    extension_size: int = 2  # each extension adds this many times rollouts_per_task samples per task
    extend_p: float = 0.2  # a live challenger ahead with a "better" p-value at most this is extended
    extension_share: float = 0.6  # of the last look's level, spent on the extensions (split evenly)


@dataclass
class RaceEntry:
    candidate_id: str
    per_task: dict[str, float] = field(default_factory=dict)  # task id -> challenger's mean reward
    status: str = "live"  # live, accepted, passed (passed the test, not the best), dropped, exhausted,
    # cut (the run's budget ended first)
    reason: str = ""
    p_better: float = 1.0
    mean_diff: float = 0.0


@dataclass
class RaceResult:
    entries: list[RaceEntry]
    accepted: str | None  # the winner's candidate id
    looks: int  # looks taken
    tasks_seen: int  # search tasks the race reached
    rollouts: int  # rollouts it cost: the challengers', and the incumbent's in extensions
    reason: str
    extended: int = 0  # extensions run


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


def split_last_level(
    levels: list[float], n_tasks: int, settings: RaceSettings
) -> tuple[list[float], list[float]]:
    """The looks' levels with part of the last one moved to the extension rounds; none is moved when
    n_tasks could not reach either part (n tasks cannot give p below 2^-n), as on a tiny split."""
    last = levels[-1]
    moved = last * settings.extension_share
    rounds = settings.extensions
    if rounds <= 0 or 0.5**n_tasks > min(moved / max(1, rounds), last - moved):
        return levels, []
    return [*levels[:-1], last - moved], [moved / rounds] * rounds


def test_look(
    entries: list[RaceEntry], incumbent: dict[str, float], level: float, rng, settings
) -> list[RaceEntry]:
    """Update each entry's p-value and mean difference; return those that pass `level`."""
    passed = []
    for e in entries:
        ids = list(e.per_task)
        diffs = np.array([e.per_task[t] - incumbent[t] for t in ids])
        e.mean_diff = float(diffs.mean())
        e.p_better = sign_flip_p(diffs, rng, settings.flips)
        if e.p_better <= level:
            passed.append(e)
    return passed


def decided(
    entries: list[RaceEntry], passed: list[RaceEntry], level: float, settings: RaceSettings, note: str
) -> tuple[str, str]:
    """Mark the winner and the others that passed; (winner id, reason)."""
    winner = max(passed, key=lambda e: e.mean_diff)
    for e in passed:
        e.status = "accepted" if e is winner else "passed"
        e.reason = f"p {e.p_better:.4f} <= {level:.4f} after {len(e.per_task)} tasks{note}"
    reason = (
        f"{winner.candidate_id} accepted: mean diff {winner.mean_diff:+.4f}, sign-flip p "
        f"{winner.p_better:.4f} <= {level:.4f} (alpha {settings.alpha:g} over {len(entries)} "
        f"challengers and the looks) after {len(winner.per_task)} tasks{note}"
    )
    return winner.candidate_id, reason


def race(
    challengers: list[str],
    incumbent: dict[str, float],
    tasks: list[str],
    score: Callable[[list[str], list[str], int], dict[str, dict[str, float]] | None],
    rollouts_per_task: int,
    settings: RaceSettings,
    seed: int = 0,
    incumbent_id: str = "incumbent",
) -> RaceResult:
    """Race `challengers` on `tasks` (in this order) against the incumbent's per-task scores.

    `score(candidate_ids, task_ids, round)` runs the candidates on the tasks and returns their per-task
    means: round 0 is the race itself, round r >= 1 an extension's fresh samples (the ids then include
    `incumbent_id`). It returns None when the run's budget cannot pay for them: the race then ends there
    undecided, which only removes chances to pass."""
    rng = np.random.default_rng(seed)
    entries = [RaceEntry(cid) for cid in challengers]
    sizes = look_sizes(len(tasks), settings)
    levels = look_levels(sizes, len(challengers), settings.alpha, settings.early_share)
    levels, extension_levels = split_last_level(levels, len(tasks), settings)
    seen, rollouts, looks = 0, 0, 0
    for size, level in zip(sizes, levels, strict=True):
        live = [e for e in entries if e.status == "live"]
        if not live:
            break
        batch = tasks[seen:size]
        scores = score([e.candidate_id for e in live], batch, 0)
        if scores is None:
            return cut_short(entries, looks, seen, rollouts, f"look {looks + 1}")
        rollouts += len(live) * len(batch) * rollouts_per_task
        seen, looks = size, looks + 1
        for e in live:
            e.per_task.update(scores[e.candidate_id])
        passed = test_look(live, incumbent, level, rng, settings)
        for e in live:
            if e in passed:
                continue
            diffs = np.array([e.per_task[t] - incumbent[t] for t in e.per_task])
            p_worse = sign_flip_p(-diffs, rng, settings.flips)
            if p_worse <= settings.drop_p:
                e.status, e.reason = "dropped", f"worse (p {p_worse:.3f}) after {len(diffs)} tasks"
            elif not extension_levels and best_possible_p(diffs, len(tasks) - seen) > levels[-1]:
                e.status, e.reason = "dropped", f"cannot pass any more ({len(tasks) - seen} tasks left)"
        if passed:
            winner, reason = decided(entries, passed, level, settings, f", {rollouts} rollouts")
            return RaceResult(entries, winner, looks, seen, rollouts, reason)
    # the tasks ran out: more samples per task for the promising ones, the incumbent alongside
    rounds = {e.candidate_id: [dict(e.per_task)] for e in entries}
    reference = [dict(incumbent)]
    for r, level in enumerate(extension_levels, start=1):
        promising = [
            e for e in entries if e.status == "live" and e.mean_diff > 0 and e.p_better <= settings.extend_p
        ]
        if not promising or seen < len(tasks):
            break
        ids = [e.candidate_id for e in promising]
        for _ in range(settings.extension_size):
            scores = score([*ids, incumbent_id], tasks, len(reference))
            if scores is None:
                return cut_short(entries, looks, seen, rollouts, f"extension {r}")
            rollouts += (len(ids) + 1) * len(tasks) * rollouts_per_task
            reference.append(scores[incumbent_id])
            for e in promising:
                rounds[e.candidate_id].append(scores[e.candidate_id])
        pooled_incumbent = {t: float(np.mean([m[t] for m in reference])) for t in tasks}
        for e in promising:
            e.per_task = {t: float(np.mean([m[t] for m in rounds[e.candidate_id]])) for t in tasks}
        passed = test_look(promising, pooled_incumbent, level, rng, settings)
        if passed:
            note = f" x {len(reference) * rollouts_per_task} samples each, {rollouts} rollouts"
            winner, reason = decided(entries, passed, level, settings, note)
            return RaceResult(entries, winner, looks, seen, rollouts, reason, r)
    extended = (len(reference) - 1) // max(1, settings.extension_size)
    for e in entries:
        if e.status == "live":
            e.status, e.reason = "exhausted", f"p {e.p_better:.4f} not below the level on all {seen} tasks"
    note = f", extended {extended}x" if extended else ""
    reason = f"no challenger passed after {seen} tasks{note}, {rollouts} rollouts"
    return RaceResult(entries, None, looks, seen, rollouts, reason, extended)


def cut_short(entries: list[RaceEntry], looks: int, seen: int, rollouts: int, step: str) -> RaceResult:
    """The run's budget ended before `step`: nothing is accepted, and the live challengers say why."""
    for e in entries:
        if e.status == "live":
            e.status, e.reason = "cut", f"the budget ran out before {step} (p {e.p_better:.4f})"
    reason = f"{NO_DECISION}: the budget ran out before {step}, after {seen} tasks, {rollouts} rollouts"
    return RaceResult(entries, None, looks, seen, rollouts, reason)
