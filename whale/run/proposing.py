"""The configured proposer for one search iteration, the brief it reads, and its budget in the run state."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rich.console import Console

from whale.core.config import Config
from whale.core.progress import track
from whale.domains.base import Domain, Task
from whale.run.rundir import RunState
from whale.run.schedule import method_rules
from whale.search.mutation import MutationProposer
from whale.search.program import ProgramProposer
from whale.search.proposer import Proposal, ProposalRequest, Proposer, ProposerUsage, budget_spent, full_brief
from whale.search.resample import ResampleProposer
from whale.search.toolspec import tool_specs


@dataclass
class ShownProposer:
    """A proposer whose sessions show a live bar (elapsed time, candidates returned): LLM calls and agent
    sessions take minutes, and a silent terminal looks hung."""

    inner: Proposer
    console: Console

    @property
    def name(self) -> str:
        return self.inner.name

    def propose(self, request: ProposalRequest) -> Proposal:
        label = f"{self.inner.name} proposer: up to {request.n} candidates"
        with track(self.console, label, request.n) as tick:
            proposal = self.inner.propose(request)
            for _ in proposal.candidates:
                tick()
        return proposal


def build_proposer(
    cfg: Config,
    domain: Domain,
    usage: ProposerUsage,
    iteration: int,
    console: Console,
    task: Task,
) -> Proposer:
    """The offline proposers are re-seeded per iteration, so a resumed run proposes what an uninterrupted
    one would have; LLM and agent proposers charge `usage`. `task`: one search task, whose inputs and
    tools show the shape the program proposer writes for."""
    p, rules = cfg.proposer, method_rules(cfg.schedule.method)
    if rules.resample:  # the control: whatever proposer is configured, copies of the incumbent
        return ResampleProposer()
    if p.kind == "llm":
        from whale.search.llm_proposer import LLMProposer

        return ShownProposer(LLMProposer(p, usage, seed=cfg.seed), console)
    if p.kind == "agent":
        from whale.search.agent_proposer import AgentProposer

        return ShownProposer(AgentProposer(p, usage), console)
    prompts_only = rules.prompts_only
    if p.kind == "program" and not prompts_only:  # fast-slow edits prompt text only: the knob mutator
        tools = tool_specs(domain.toolbox(task), domain.brief)
        seed = cfg.seed * 7919 + iteration
        return ProgramProposer(domain.knob_pool(), seed, task.inputs, tools, rules.random_mechanisms)
    return MutationProposer(
        domain.knob_pool(),
        seed=cfg.seed * 7919 + iteration,
        text_only=prompts_only,
    )


def search_brief(cfg: Config, domain: Domain) -> str:
    text = full_brief(domain.brief)
    if method_rules(cfg.schedule.method).prompts_only:
        text += (
            "\nThis run evolves prompts only. Read the parents' traces and failures, then rewrite the text"
            " sent to the model: change string constants only. A file that changes anything else (code,"
            " numbers, keys, what an f-string interpolates) is rejected before it runs.\n"
        )
    return text


EMPTY_SEARCHES = 3  # search iterations in a row without a runnable candidate before search stops


def record_proposal(
    state: RunState, cfg: Config, usage: ProposerUsage, proposal: Proposal, spent: int
) -> None:
    """Keep the proposer's usage in the run state, and why it may not run again: its budget is spent, or
    it has offered nothing new to run (only duplicates or invalid files) for EMPTY_SEARCHES iterations,
    which cost no rollouts and so would never end a harness-only run."""
    state.proposer_usage = asdict(usage)
    state.empty_searches = 0 if spent else state.empty_searches + 1
    if state.empty_searches >= EMPTY_SEARCHES:
        state.proposer_spent = (
            f"the proposer offered no new runnable candidate in {EMPTY_SEARCHES} iterations"
        )
    if proposal.exhausted:
        p = cfg.proposer
        state.proposer_spent = (
            budget_spent(usage, p.max_sessions, p.max_tokens, p.max_usd) or "proposer budget spent"
        )


def proposer_spent(state: RunState, cfg: Config, usage: ProposerUsage) -> str:
    """Why the proposer may not run again ("" when it may); remembered in the state once true."""
    p = cfg.proposer
    if p.kind != "mutation":
        state.proposer_spent = budget_spent(usage, p.max_sessions, p.max_tokens, p.max_usd)
    return state.proposer_spent
