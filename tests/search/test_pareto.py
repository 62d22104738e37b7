"""Fast-Slow's population by Pareto front over search tasks."""

from __future__ import annotations

import random
from collections import Counter

from whale.search.archive import CandidateEval
from whale.search.pareto import dominates, draw_parent, pareto_front, pareto_order, task_leaders


def ev(cid: str, **per_task: float) -> CandidateEval:
    return CandidateEval(cid, "w0", per_task, sum(per_task.values()) / len(per_task), 10.0, 1.0, 0)


A = ev("a", t1=1.0, t2=1.0, t3=0.0, t4=0.0)  # best mean, leads t1 and t2
B = ev("b", t1=0.0, t2=0.0, t3=1.0, t4=0.0)  # lower mean, the only one to solve t3
C = ev("c", t1=0.6, t2=0.6, t3=0.0, t4=0.0)  # dominated by a
D = ev("d", t1=1.0, t2=0.0, t3=0.0, t4=0.0)  # ties a on t1 but is dominated by it


def test_a_member_that_alone_solves_a_task_is_kept_over_a_higher_mean():
    assert task_leaders([A, B, C, D]) == {"a": 2, "b": 1, "c": 0, "d": 1}  # t4: nobody solves it
    assert dominates(A, C) and dominates(A, D) and not dominates(A, B) and not dominates(B, A)
    assert [e.candidate_id for e in pareto_front([A, B, C, D])] == ["a", "b"]
    order = [e.candidate_id for e in pareto_order([C, D, B, A])]
    assert order == ["a", "b", "c", "d"]  # the front by tasks led, then the rest by mean
    by_mean = sorted([A, B, C, D], key=lambda e: -e.mean)
    assert [e.candidate_id for e in by_mean][:2] == ["a", "c"]  # top-2 by mean would have dropped b


def test_parents_are_drawn_from_the_front_in_proportion_to_the_tasks_they_lead():
    rng = random.Random(0)
    drawn = Counter(draw_parent([A, B, C, D], rng).candidate_id for _ in range(3000))
    assert set(drawn) == {"a", "b"}
    assert 0.6 < drawn["a"] / 3000 < 0.73  # 2 of the 3 tasks led
    nothing = [ev("x", t1=0.0), ev("y", t1=0.0)]
    assert draw_parent(nothing, rng).candidate_id == "x"  # no task solved: the best mean, the older on a tie
