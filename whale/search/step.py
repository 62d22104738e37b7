"""One harness-search iteration under frozen weights, and the incumbent re-evaluation at phase start.

Each proposed candidate is validated statically and smoke-tested on a couple of tasks (`screen`). Then,
by `search.acceptance`:
    paired  every challenger is evaluated on the whole harness-search split; the best replaces the
            incumbent only when its paired per-task improvement has a lower confidence bound above zero;
    race    the challengers are raced against the incumbent on growing batches of search tasks (race.py):
            losers are dropped early, and a winner needs a sign-flip test whose false-acceptance rate
            over the whole race is at most alpha.
Fast-Slow's population iteration uses the same screening and full evaluation, but keeps the top-P
instead of one incumbent.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from whale.core.config import Config
from whale.core.stats import decide_acceptance, task_means
from whale.harness import validate
from whale.harness.calls import RolloutJob
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.task import Task
from whale.rollout.executor import Executor
from whale.search.archive import Archive, CandidateEval, code_fingerprint
from whale.search.diagnosis import diagnose
from whale.search.mutation import signature
from whale.search.proposer import Proposal, ProposalRequest, Proposer
from whale.search.race import RaceResult, RaceSettings, race


@dataclass(frozen=True)
class SearchSettings:
    """Everything one search step needs from the config (search.*, and the population size)."""

    candidates: int  # challengers proposed per iteration
    rollouts_per_task: int  # on the search split, per candidate
    smoke_tasks: int  # tasks a candidate must run on without failing before its evaluation
    alpha: float  # the paired acceptance test's level
    brief: str  # what the proposer reads about the domain
    population: int = 1  # fast-slow: members kept
    acceptance: str = "paired"  # paired: every challenger on every task, then a paired LCB; race: race.py

    @classmethod
    def from_config(cls, cfg: Config, brief: str) -> SearchSettings:
        s = cfg.search
        population = cfg.schedule.population
        return cls(
            s.candidates_per_iter,
            s.rollouts_per_task,
            s.smoke_tasks,
            s.alpha,
            brief,
            population,
            s.acceptance,
        )

    def rollouts(self, tasks: int) -> int:
        """Rollouts one iteration spends at most: every candidate smoke-tested and evaluated."""
        return self.candidates * (tasks * self.rollouts_per_task + self.smoke_tasks)


@dataclass
class IterationResult:
    incumbent: HarnessCandidate
    incumbent_eval: CandidateEval
    accepted: bool
    reason: str
    rollouts: list[Rollout] = field(default_factory=list)
    evaluated: list[CandidateEval] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    proposal: Proposal = field(default_factory=lambda: Proposal([]))
    race_rollouts: int | None = None  # acceptance=race: the challenger rollouts the decision cost


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


def propose_new(
    archive: Archive,
    proposer: Proposer,
    parents: list[HarnessCandidate],
    n: int,
    weights_version: str,
    brief: str = "",
    iteration: int = 0,
) -> Proposal:
    """Ask the proposer for up to n candidates, named after the archive's next ids."""
    seen = {signature(archive.load(cid).source) for cid in archive.ids() if _parses(archive.load(cid).source)}
    counter = iter(range(len(archive.ids()), 10**6))
    request = ProposalRequest(
        archive, parents, n, lambda: f"c{next(counter):04d}", weights_version, brief, iteration, seen
    )
    proposal = proposer.propose(request)
    proposal.candidates = proposal.candidates[:n]
    return proposal


def try_candidates(
    runner: Executor,
    archive: Archive,
    candidates: list[HarnessCandidate],
    tasks: list[Task],
    settings: SearchSettings,
    result: IterationResult,
    on_done: Callable[[Rollout], None] | None = None,
) -> None:
    """Screen the candidates, then score each one that runs on the whole search split."""
    for cand in screen(runner, archive, candidates, tasks, settings, result, on_done):
        archive.set_status(cand, "evaluated")
        ev, spent = evaluate_candidate(runner, archive, cand, tasks, settings.rollouts_per_task, on_done)
        result.rollouts += spent
        result.evaluated.append(ev)


def screen(
    runner: Executor,
    archive: Archive,
    candidates: list[HarnessCandidate],
    tasks: list[Task],
    settings: SearchSettings,
    result: IterationResult,
    on_done: Callable[[Rollout], None] | None = None,
) -> list[HarnessCandidate]:
    """Validate and smoke-test each candidate; those that fail get a reason, the rest are returned.

    A candidate whose code is already in the archive (same AST, comments and docstrings ignored) is
    recorded as a duplicate and not run again.
    """
    runnable = []
    known = archive.fingerprints()
    for cand in candidates:
        archive.add(cand)
        twin = known.get(code_fingerprint(cand.source))
        if twin is not None:
            archive.set_status(cand, "duplicate", f"same code as {twin}")
            result.failed[cand.id] = f"duplicate of {twin}"
            continue
        known[code_fingerprint(cand.source)] = cand.id
        problems = validate.problems(cand.source)
        if problems:
            archive.set_status(cand, "invalid", "; ".join(problems[:3]))
            result.failed[cand.id] = problems[0]
            continue
        smoke = runner.run([RolloutJob(t, cand, 0) for t in tasks[: settings.smoke_tasks]], on_done)
        result.rollouts += smoke
        if all(r.error is not None for r in smoke):
            archive.set_status(cand, "failed", f"smoke test: {smoke[0].error}")
            result.failed[cand.id] = smoke[0].error or ""
            continue
        runnable.append(cand)
    return runnable


def race_candidates(
    runner: Executor,
    archive: Archive,
    candidates: list[HarnessCandidate],
    incumbent_eval: CandidateEval,
    tasks: list[Task],
    settings: SearchSettings,
    seed: int,
    result: IterationResult,
    on_done: Callable[[Rollout], None] | None = None,
) -> RaceResult:
    """Race the screened candidates against the incumbent on the search tasks in a seeded order; every
    rollout is charged and each candidate's archive score covers the tasks it reached."""
    by_id = {c.id: c for c in candidates}
    spent: dict[str, list[Rollout]] = {c.id: [] for c in candidates}
    order = [t.id for t in tasks]
    random.Random(seed).shuffle(order)
    task_of = {t.id: t for t in tasks}
    n = settings.rollouts_per_task

    def score(ids: list[str], batch: list[str]) -> dict[str, dict[str, float]]:
        jobs = [RolloutJob(task_of[t], by_id[cid], s) for cid in ids for t in batch for s in range(n)]
        rollouts = runner.run(jobs, on_done)
        result.rollouts += rollouts
        for r in rollouts:
            spent[r.harness_id].append(r)
        return {
            cid: task_means((r.task_id, r.reward) for r in rollouts if r.harness_id == cid) for cid in ids
        }

    race_settings = RaceSettings(alpha=settings.alpha)
    outcome = race([c.id for c in candidates], incumbent_eval.per_task, order, score, n, race_settings, seed)
    inputs = {t.id: t.inputs for t in tasks}
    for entry in outcome.entries:
        ev = summarize(entry.candidate_id, runner.weights_version, spent[entry.candidate_id], inputs)
        archive.record_eval(ev, spent[entry.candidate_id])
        result.evaluated.append(ev)
        if entry.status != "accepted":
            archive.set_status(by_id[entry.candidate_id], "rejected", f"race: {entry.status}, {entry.reason}")
    return outcome


def harness_step(
    runner: Executor,
    archive: Archive,
    proposer: Proposer,
    incumbent: HarnessCandidate,
    incumbent_eval: CandidateEval,
    tasks: list[Task],
    settings: SearchSettings,
    seed: int,
    on_done: Callable[[Rollout], None] | None = None,
) -> IterationResult:
    """One search iteration against one incumbent: propose, validate, smoke-test, evaluate, and accept the
    best challenger only if the paired test says so. `seed` seeds the proposer and the test."""
    weights = runner.weights_version
    frontier = [archive.load(cid) for cid in archive.update_frontier(weights) if cid != incumbent.id]
    parents = [incumbent, *frontier]
    proposal = propose_new(archive, proposer, parents, settings.candidates, weights, settings.brief, seed)
    result = IterationResult(incumbent, incumbent_eval, False, "no valid challenger", proposal=proposal)
    if not proposal.candidates:
        result.reason = f"no candidates: {proposal.note or 'the proposer returned none'}"
    if settings.acceptance == "race":
        runnable = screen(runner, archive, proposal.candidates, tasks, settings, result, on_done)
        if runnable:
            outcome = race_candidates(
                runner, archive, runnable, incumbent_eval, tasks, settings, seed, result, on_done
            )
            result.reason, result.race_rollouts = outcome.reason, outcome.rollouts
            if outcome.accepted:
                result.accepted = True
                result.incumbent = archive.load(outcome.accepted)
                result.incumbent_eval = next(
                    e for e in result.evaluated if e.candidate_id == outcome.accepted
                )
                archive.set_status(result.incumbent, "accepted", outcome.reason)
        archive.update_frontier(weights)
        return result
    try_candidates(runner, archive, proposal.candidates, tasks, settings, result, on_done)
    if result.evaluated:
        best = max(result.evaluated, key=lambda e: (e.mean, -e.tokens_per_rollout))
        ids = sorted(incumbent_eval.per_task)
        decision = decide_acceptance(
            [best.per_task[t] for t in ids],
            [incumbent_eval.per_task[t] for t in ids],
            alpha=settings.alpha,
            seed=seed,
        )
        result.reason = f"{best.candidate_id} vs {incumbent.id}: {decision.reason}"
        if decision.accepted:
            result.accepted = True
            result.incumbent = archive.load(best.candidate_id)
            result.incumbent_eval = best
            archive.set_status(result.incumbent, "accepted", decision.reason)
        else:
            archive.set_status(archive.load(best.candidate_id), "rejected", decision.reason)
    archive.update_frontier(weights)
    return result


@dataclass
class PopulationResult:
    population: list[CandidateEval]  # best first
    rollouts: list[Rollout]
    evaluated: list[CandidateEval]
    failed: dict[str, str]
    proposal: Proposal


def population_step(
    runner: Executor,
    archive: Archive,
    proposer: Proposer,
    population: list[CandidateEval],
    tasks: list[Task],
    settings: SearchSettings,
    iteration: int,
    on_done: Callable[[Rollout], None] | None = None,
) -> PopulationResult:
    """Fast-Slow's fast loop: children of population members compete with them; the top `settings.population`
    survive.

    `population` must be scored under the current weights. Ties keep the cheaper, then the older member.
    """
    members = sorted(population, key=lambda e: (-e.mean, e.tokens_per_rollout, e.candidate_id))
    parents = [archive.load(e.candidate_id) for e in members]
    weights = runner.weights_version
    proposal = propose_new(
        archive, proposer, parents, settings.candidates, weights, settings.brief, iteration
    )
    step = IterationResult(parents[0], members[0], False, "", proposal=proposal)
    try_candidates(runner, archive, proposal.candidates, tasks, settings, step, on_done)
    pool = sorted(members + step.evaluated, key=lambda e: (-e.mean, e.tokens_per_rollout, e.candidate_id))
    survivors = pool[: max(1, settings.population)]
    for ev in pool:
        if archive.meta(ev.candidate_id)["status"] != "seed":
            status = "population" if ev in survivors else "dropped"
            archive.set_status(archive.load(ev.candidate_id), status, f"search score {ev.mean:.3f}")
    archive.update_frontier(runner.weights_version)
    return PopulationResult(survivors, step.rollouts, step.evaluated, step.failed, proposal)


def _parses(source: str) -> bool:
    try:
        signature(source)
    except SyntaxError:
        return False
    return True
