"""Fast-Slow's population by Pareto front over search tasks, as GEPA keeps its candidates.

A member that is the best on some task is kept even when its mean is lower: it holds something the
others lack, and its children may combine it with the rest. GEPA's rule, read from its candidate
selection: a candidate is on the front when it reaches the best score on at least one task and no other
candidate dominates it (at least as good on every task, better on one); parents are drawn from the front
with probability proportional to the tasks they lead.
"""

from __future__ import annotations

import random

from whale.search.archive import CandidateEval


def task_leaders(evals: list[CandidateEval]) -> dict[str, int]:
    """Candidate id -> the search tasks on which it reaches the best score (ties count for each)."""
    counts = {e.candidate_id: 0 for e in evals}
    tasks = set().union(*(e.per_task for e in evals)) if evals else set()
    for t in tasks:
        best = max(e.per_task.get(t, 0.0) for e in evals)
        if best <= 0.0:
            continue  # nobody solves it: no one leads
        for e in evals:
            if e.per_task.get(t, 0.0) == best:
                counts[e.candidate_id] += 1
    return counts


def dominates(a: CandidateEval, b: CandidateEval) -> bool:
    tasks = set(a.per_task) | set(b.per_task)
    pairs = [(a.per_task.get(t, 0.0), b.per_task.get(t, 0.0)) for t in tasks]
    return all(x >= y for x, y in pairs) and any(x > y for x, y in pairs)


def pareto_front(evals: list[CandidateEval]) -> list[CandidateEval]:
    """The members that lead some task and that no member dominates."""
    leads = task_leaders(evals)
    return [
        e
        for e in evals
        if leads[e.candidate_id] > 0 and not any(dominates(o, e) for o in evals if o is not e)
    ]


def pareto_order(evals: list[CandidateEval]) -> list[CandidateEval]:
    """The front first (more tasks led, then mean), then the rest by mean; ties keep the cheaper, then
    the older member."""
    leads = task_leaders(evals)
    front = {e.candidate_id for e in pareto_front(evals)}

    def key(e: CandidateEval) -> tuple:
        on_front = e.candidate_id in front
        return (
            not on_front,
            -leads[e.candidate_id] if on_front else 0,
            -e.mean,
            e.tokens_per_rollout,
            e.candidate_id,
        )

    return sorted(evals, key=key)


def draw_parent(evals: list[CandidateEval], rng: random.Random) -> CandidateEval:
    """A parent from the front, weighted by the tasks each leads; the best mean when no task is solved."""
    front = pareto_front(evals)
    if not front:
        return max(evals, key=lambda e: (e.mean, -e.tokens_per_rollout))
    leads = task_leaders(evals)
    return rng.choices(front, weights=[leads[e.candidate_id] for e in front])[0]
