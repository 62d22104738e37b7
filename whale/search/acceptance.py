"""How a challenger becomes the agent's harness: one rule, built once from `search.acceptance` and used by
every method's search step (whale, whale-adaptive, stagewise, harness-only and Fast-Slow's population).

    race    (default) challengers race the incumbent on growing batches of search tasks (race.py): losers
            are dropped early, and a winner needs a sign-flip test whose false-acceptance rate over the
            whole race is at most alpha. The winner is then completed on the tasks the race did not reach,
            so the next race has a reference on every task.
    paired  every challenger on every search task; the best by mean is accepted when its paired bootstrap
            lower confidence bound is above zero. Picking the best first makes it anti-conservative
            (about 10% false acceptance at alpha 0.05, docs/proposers.md).
    argmax  every challenger on every search task; the best by mean replaces the incumbent whenever its
            mean is higher, with no test: the paper's reference code, and Fast-Slow's top-P before.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from whale.core.stats import decide_acceptance, task_means
from whale.harness.calls import RolloutJob
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.task import Task
from whale.rollout.executor import Executor
from whale.search.archive import Archive, CandidateEval
from whale.search.race import RaceSettings, race
from whale.search.scoring import evaluate_candidate, summarize

ACCEPTANCE_KINDS = ("race", "paired", "argmax")


@dataclass
class Trial:
    """Where one decision runs its challengers, and what it spent: every rollout is charged to the run."""

    runner: Executor
    archive: Archive
    tasks: list[Task]  # the search split
    rollouts_per_task: int
    seed: int
    on_done: Callable[[Rollout], None] | None = None
    room: int | None = None  # rollouts the run's budget has left for this decision (None: no limit)
    rollouts: list[Rollout] = field(default_factory=list)
    evaluated: list[CandidateEval] = field(default_factory=list)
    cut: bool = False  # some work was refused because the budget could not pay for it

    def fits(self, jobs: int) -> bool:
        """Whether `jobs` more rollouts stay within the budget: the run's last unit is cut to fit."""
        if self.room is None or len(self.rollouts) + jobs <= self.room:
            return True
        self.cut = True
        return False

    def run(self, jobs: list[RolloutJob]) -> list[Rollout]:
        rollouts = self.runner.run(jobs, self.on_done)
        self.rollouts += rollouts
        return rollouts


@dataclass
class Verdict:
    accepted: str | None  # the winner's candidate id
    reason: str
    rejected: dict[str, str] = field(default_factory=dict)  # candidate id -> why it lost
    decision_rollouts: int = 0  # challenger rollouts the decision cost (a winner's completion aside)


class Acceptance(Protocol):
    name: ClassVar[str]

    def judge(self, trial: Trial, challengers: list[HarnessCandidate], incumbent: CandidateEval) -> Verdict:
        """Decide whether one of `challengers` (screened, runnable) replaces `incumbent`, whose per-task
        scores under the current weights cover the search split."""
        ...


def evaluate_all(trial: Trial, challengers: list[HarnessCandidate]) -> list[CandidateEval]:
    """Every challenger on every search task; at the end of the budget, those that still fit."""
    evals = []
    for cand in challengers:
        if not trial.fits(len(trial.tasks) * trial.rollouts_per_task):
            break
        trial.archive.set_status(cand, "evaluated")
        ev, spent = evaluate_candidate(
            trial.runner, trial.archive, cand, trial.tasks, trial.rollouts_per_task, trial.on_done
        )
        trial.rollouts += spent
        trial.evaluated.append(ev)
        evals.append(ev)
    return evals


def best_of(evals: list[CandidateEval]) -> CandidateEval:
    return max(evals, key=lambda e: (e.mean, -e.tokens_per_rollout))


@dataclass(frozen=True)
class Argmax:
    name: ClassVar[str] = "argmax"

    def judge(self, trial: Trial, challengers: list[HarnessCandidate], incumbent: CandidateEval) -> Verdict:
        evals = evaluate_all(trial, challengers)
        spent = sum(e.rollouts for e in evals)
        if not evals:
            return Verdict(None, "no challenger fits the budget left")
        best = best_of(evals)
        losers = {e.candidate_id: "argmax: not the best" for e in evals if e is not best}
        cmp = f"{best.candidate_id} {best.mean:.4f} vs {incumbent.candidate_id} {incumbent.mean:.4f}"
        if best.mean > incumbent.mean:
            return Verdict(best.candidate_id, f"argmax: {cmp}", losers, spent)
        losers[best.candidate_id] = f"argmax: {cmp}, not higher"
        return Verdict(None, f"argmax: {cmp}, not higher", losers, spent)


@dataclass(frozen=True)
class Paired:
    alpha: float = 0.05
    name: ClassVar[str] = "paired"

    def judge(self, trial: Trial, challengers: list[HarnessCandidate], incumbent: CandidateEval) -> Verdict:
        evals = evaluate_all(trial, challengers)
        spent = sum(e.rollouts for e in evals)
        if not evals:
            return Verdict(None, "no challenger fits the budget left")
        best = best_of(evals)
        ids = sorted(incumbent.per_task)
        decision = decide_acceptance(
            [best.per_task[t] for t in ids],
            [incumbent.per_task[t] for t in ids],
            alpha=self.alpha,
            seed=trial.seed,
        )
        reason = f"{best.candidate_id} vs {incumbent.candidate_id}: {decision.reason}"
        losers = {e.candidate_id: "paired: not the best" for e in evals if e is not best}
        if decision.accepted:
            return Verdict(best.candidate_id, reason, losers, spent)
        return Verdict(None, reason, losers | {best.candidate_id: decision.reason}, spent)


@dataclass(frozen=True)
class Race:
    settings: RaceSettings = RaceSettings()
    name: ClassVar[str] = "race"

    def judge(self, trial: Trial, challengers: list[HarnessCandidate], incumbent: CandidateEval) -> Verdict:
        if not challengers:
            return Verdict(None, "no challenger")
        by_id = {c.id: c for c in challengers}
        incumbent_id = incumbent.candidate_id
        runs = by_id | {incumbent_id: trial.archive.load(incumbent_id)}
        spent: dict[str, list[Rollout]] = {cid: [] for cid in runs}
        task_of = {t.id: t for t in trial.tasks if t.id in incumbent.per_task}
        order = sorted(task_of)
        random.Random(trial.seed).shuffle(order)
        n = trial.rollouts_per_task

        def score(ids: list[str], batch: list[str], round_: int) -> dict[str, dict[str, float]] | None:
            """Round 0: samples 0..n-1, as in the incumbent's own score; extension round r: the next n.
            None when the budget cannot pay for them."""
            samples = range(round_ * n, (round_ + 1) * n)
            jobs = [RolloutJob(task_of[t], runs[cid], s) for cid in ids for t in batch for s in samples]
            if not trial.fits(len(jobs)):
                return None
            rollouts = trial.run(jobs)
            for r in rollouts:
                spent[r.harness_id].append(r)
            return {
                cid: task_means((r.task_id, r.reward) for r in rollouts if r.harness_id == cid) for cid in ids
            }

        outcome = race(
            list(by_id), incumbent.per_task, order, score, n, self.settings, trial.seed, incumbent_id
        )
        winner = outcome.accepted
        if winner is not None:  # the tasks the race did not reach, so the winner's score covers the split
            reached = {r.task_id for r in spent[winner]}
            left = [t for t in trial.tasks if t.id not in reached]
            rest = [RolloutJob(t, by_id[winner], s) for t in left for s in range(n)]
            if trial.fits(len(rest)):  # else the budget ends with this unit: no next race needs them
                spent[winner] += trial.run(rest)
        inputs = {t.id: t.inputs for t in trial.tasks}
        for cid in by_id:  # scored on samples 0..n-1 only, like every incumbent the next race compares with
            if not spent[cid]:
                continue  # the budget ended before its first look: it has no score
            first = [r for r in spent[cid] if r.sample < n]
            ev = summarize(cid, trial.runner.weights_version, first, inputs)
            trial.archive.record_eval(ev, spent[cid])
            trial.evaluated.append(ev)
        rejected = {
            e.candidate_id: f"race: {e.status}, {e.reason}" for e in outcome.entries if e.status != "accepted"
        }
        return Verdict(winner, outcome.reason, rejected, outcome.rollouts)


def build_acceptance(kind: str, alpha: float) -> Acceptance:
    if kind == "race":
        return Race(RaceSettings(alpha=alpha))
    if kind == "paired":
        return Paired(alpha)
    if kind == "argmax":
        return Argmax()
    raise ValueError(f"search.acceptance: unknown rule {kind!r}; one of {', '.join(ACCEPTANCE_KINDS)}")
