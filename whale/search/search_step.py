"""One harness-search iteration under frozen weights: propose, screen, then let the acceptance rule decide.

Each proposed candidate is validated statically and smoke-tested on a couple of tasks (`screen`). The
runnable ones go to `settings.acceptance` (acceptance.py), the one rule every method uses: it evaluates
them as it needs and names the winner, if any. Fast-Slow's population iteration asks the same rule
whether a child replaces the population's leader, the harness the agent is evaluated with; the other
members are kept by search score, as parents for the next children.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from whale.core.config import Config
from whale.core.timing import unit
from whale.harness import validate
from whale.harness.calls import RolloutJob
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.task import Task
from whale.rollout.executor import Executor
from whale.search.acceptance import Acceptance, Trial, Verdict, build_acceptance
from whale.search.archive import Archive, CandidateEval, code_fingerprint
from whale.search.mutation import signature
from whale.search.pareto import draw_parent, pareto_order
from whale.search.prompts_only import outside_text
from whale.search.proposer import Proposal, ProposalRequest, Proposer


@dataclass(frozen=True)
class SearchSettings:
    """Everything one search step needs from the config (search.*, and the population size)."""

    candidates: int  # challengers proposed per iteration
    rollouts_per_task: int  # on the search split, per candidate
    smoke_tasks: int  # tasks a candidate must run on without failing before its evaluation
    brief: str  # what the proposer reads about the domain
    population: int = 1  # fast-slow: members kept
    acceptance: Acceptance = field(default_factory=lambda: build_acceptance("race", 0.05))
    prompts_only: bool = False  # fast-slow: a child may change its parent's string constants only

    @classmethod
    def from_config(cls, cfg: Config, brief: str, prompts_only: bool = False) -> SearchSettings:
        s = cfg.search
        population = cfg.schedule.population
        return cls(
            s.candidates_per_iter,
            s.rollouts_per_task,
            s.smoke_tasks,
            brief,
            population,
            build_acceptance(s.acceptance, s.alpha),
            prompts_only,
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
    decision_rollouts: int = 0  # the challenger rollouts the acceptance decision cost
    cut: bool = False  # the run's budget ended inside this iteration


def propose_new(
    archive: Archive,
    proposer: Proposer,
    parents: list[HarnessCandidate],
    n: int,
    weights_version: str,
    brief: str = "",
    iteration: int = 0,
    failures: dict[str, int] | None = None,
) -> Proposal:
    """Ask the proposer for up to n candidates, named after the archive's next ids."""
    sources = [archive.load(cid).source for cid in archive.searched_ids()]
    seen = {signature(source) for source in sources if _parses(source)}
    counter = iter(range(len(archive.ids()), 10**6))
    request = ProposalRequest(
        archive, parents, n, lambda: f"c{next(counter):04d}", weights_version, brief, iteration, seen,
        failures,
    )  # fmt: skip
    proposal = proposer.propose(request)
    proposal.candidates = proposal.candidates[:n]
    return proposal


def screen(
    trial: Trial, candidates: list[HarnessCandidate], settings: SearchSettings, result: IterationResult
) -> list[HarnessCandidate]:
    """Validate and smoke-test each candidate; those that fail get a reason, the rest are returned.

    A candidate whose code is already in the archive (same AST, comments and docstrings ignored) is
    recorded as a duplicate and not run again, unless it draws its own random numbers (a salted copy:
    the harness-resample control). One that the budget left cannot smoke-test is not run.
    """
    runnable, archive = [], trial.archive
    known = archive.fingerprints()
    for cand in candidates:
        archive.add(cand)
        twin = None if cand.salt else known.get(code_fingerprint(cand.source))
        if twin is not None:
            archive.set_status(cand, "duplicate", f"same code as {twin}")
            result.failed[cand.id] = f"duplicate of {twin}"
            continue
        known.setdefault(code_fingerprint(cand.source), cand.id)
        problems = validate.problems(cand.source)
        if settings.prompts_only and cand.parent and not problems:
            problems = [why for why in [outside_text(archive.load(cand.parent).source, cand.source)] if why]
        if problems:
            archive.set_status(cand, "invalid", "; ".join(problems[:3]))
            result.failed[cand.id] = problems[0]
            continue
        jobs = [RolloutJob(t, cand, 0) for t in trial.tasks[: settings.smoke_tasks]]
        if not trial.fits(len(jobs)):
            archive.set_status(cand, "unrun", "the run's budget ended before its smoke test")
            result.failed[cand.id] = "not run: the budget ended"
            continue
        smoke = trial.run(jobs)
        if all(r.error is not None for r in smoke):
            archive.set_status(cand, "failed", f"smoke test: {smoke[0].error}")
            result.failed[cand.id] = smoke[0].error or ""
            continue
        runnable.append(cand)
    return runnable


def judge(
    runner: Executor,
    archive: Archive,
    candidates: list[HarnessCandidate],
    incumbent_eval: CandidateEval,
    tasks: list[Task],
    settings: SearchSettings,
    seed: int,
    result: IterationResult,
    on_done: Callable[[Rollout], None] | None = None,
    room: int | None = None,
) -> Verdict:
    """Screen the candidates, then ask the acceptance rule, all within `room` rollouts (None: no limit);
    every rollout lands in `result`."""
    trial = Trial(runner, archive, tasks, settings.rollouts_per_task, seed, on_done, room)
    runnable = screen(trial, candidates, settings, result)
    verdict = settings.acceptance.judge(trial, runnable, incumbent_eval) if runnable else Verdict(None, "")
    result.rollouts += trial.rollouts
    result.cut = trial.cut
    result.evaluated += trial.evaluated
    result.decision_rollouts = verdict.decision_rollouts
    return verdict


@unit("search iterations")
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
    room: int | None = None,
) -> IterationResult:
    """One search iteration against one incumbent: propose, screen, and let the acceptance rule decide.
    `seed` seeds the proposer's request and the rule's test; `room` caps its rollouts (the budget's end)."""
    weights = runner.weights_version
    frontier = [archive.load(cid) for cid in archive.update_frontier(weights) if cid != incumbent.id]
    parents = [incumbent, *frontier]
    proposal = propose_new(archive, proposer, parents, settings.candidates, weights, settings.brief, seed)
    result = IterationResult(incumbent, incumbent_eval, False, "no valid challenger", proposal=proposal)
    if not proposal.candidates:
        result.reason = f"no candidates: {proposal.note or 'the proposer returned none'}"
    candidates = proposal.candidates
    verdict = judge(runner, archive, candidates, incumbent_eval, tasks, settings, seed, result, on_done, room)
    result.reason = verdict.reason or result.reason
    for cid, why in verdict.rejected.items():
        archive.set_status(archive.load(cid), "rejected", why)
    if verdict.accepted:
        result.accepted = True
        result.incumbent = archive.load(verdict.accepted)
        result.incumbent_eval = next(e for e in result.evaluated if e.candidate_id == verdict.accepted)
        archive.set_status(result.incumbent, "accepted", verdict.reason)
    archive.update_frontier(weights)
    return result


@dataclass
class PopulationResult:
    population: list[CandidateEval]  # the leader (the agent's harness) first, then by search score
    rollouts: list[Rollout]
    evaluated: list[CandidateEval]
    failed: dict[str, str]
    proposal: Proposal
    accepted: bool = False  # a child replaced the leader
    reason: str = ""
    decision_rollouts: int = 0
    cut: bool = False  # the run's budget ended inside this iteration


@unit("search iterations")
def population_step(
    runner: Executor,
    archive: Archive,
    proposer: Proposer,
    population: list[CandidateEval],
    tasks: list[Task],
    settings: SearchSettings,
    iteration: int,
    on_done: Callable[[Rollout], None] | None = None,
    room: int | None = None,
) -> PopulationResult:
    """Fast-Slow's fast loop, GEPA-style: children of a parent drawn from the Pareto front over search
    tasks (pareto.py) are proposed; the acceptance rule decides whether one replaces the leader
    (`population[0]`); the other places go to the rest in Pareto order (front first).

    `population` must be scored under the current weights.
    """
    leader, *others = population
    members = [leader, *pareto_order(others)]
    drawn = draw_parent(members, random.Random(iteration))
    parents = [archive.load(e.candidate_id) for e in [drawn, *(e for e in members if e is not drawn)]]
    weights = runner.weights_version
    proposal = propose_new(
        archive, proposer, parents, settings.candidates, weights, settings.brief, iteration
    )
    step = IterationResult(archive.load(leader.candidate_id), leader, False, "", proposal=proposal)
    verdict = judge(
        runner, archive, proposal.candidates, leader, tasks, settings, iteration, step, on_done, room
    )
    children = {e.candidate_id: e for e in step.evaluated}
    if verdict.accepted:
        leader, others = children.pop(verdict.accepted), [leader, *others]
    rest = pareto_order(others + list(children.values()))
    survivors = [leader, *rest[: max(1, settings.population) - 1]]
    for ev in [leader, *rest]:
        if archive.meta(ev.candidate_id)["status"] != "seed":
            status = "population" if ev in survivors else "dropped"
            archive.set_status(archive.load(ev.candidate_id), status, f"search score {ev.mean:.3f}")
    archive.update_frontier(runner.weights_version)
    return PopulationResult(
        survivors,
        step.rollouts,
        step.evaluated,
        step.failed,
        proposal,
        verdict.accepted is not None,
        verdict.reason,
        verdict.decision_rollouts,
        step.cut,
    )


def _parses(source: str) -> bool:
    try:
        signature(source)
    except SyntaxError:
        return False
    return True
