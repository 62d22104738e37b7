"""Which harnesses a weight step's rescue runs the zero-signal tasks under (whale/weights/rescue.py).

Best first: Fast-Slow's population, then every other harness the search has scored, by its latest
search score (the frontier's leaders come first). When fewer than R exist (weight-only, or before the
first search), the offline program proposer writes the rest from the incumbent, choosing mechanisms by
the diagnosis of the failed rollouts. Those files are kept in the archive with status "rescue": never
scored, never the incumbent, invisible to the search's duplicate check (it may propose the same code
and score it), and written once per incumbent: later steps under it reuse them.
"""

from __future__ import annotations

from dataclasses import replace

from whale.core.config import Config
from whale.domains.base import Domain, Task
from whale.harness import validate
from whale.harness.records import HarnessCandidate, Rollout
from whale.search.archive import RESCUE, Archive
from whale.search.diagnosis import diagnose
from whale.search.program import ProgramProposer
from whale.search.proposer import full_brief
from whale.search.search_step import propose_new
from whale.search.toolspec import tool_specs
from whale.weights.rescue import RescuePool


def scored(archive: Archive, skip: set[str]) -> list[str]:
    """The archive's scored harnesses not in `skip`, best latest search score first."""
    best = []
    for cid in archive.ids():
        history = archive.eval_history(cid)
        if cid not in skip and history and archive.meta(cid)["status"] != RESCUE:
            best.append((-history[-1].mean, cid))
    return [cid for _, cid in sorted(best)]


def written_for(archive: Archive, incumbent: str) -> list[str]:
    return [
        cid for cid in archive.ids()
        if archive.meta(cid)["status"] == RESCUE and archive.meta(cid)["parent"] == incumbent
    ]  # fmt: skip


def rescue_pool(
    cfg: Config,
    domain: Domain,
    archive: Archive,
    members: list[str],
    task: Task,
    weights_version: str,
) -> RescuePool:
    """The pool for one weight step under `members` (the incumbent first; Fast-Slow: its population).
    `task`: one task, for the inputs' shape the program proposer writes for."""
    n, incumbent, population = cfg.weights.rescue_harnesses, members[0], members[1:]

    def pool(failed: list[Rollout]) -> list[HarnessCandidate]:
        ids = list(population)
        ids += scored(archive, {incumbent, *ids})
        written = written_for(archive, incumbent)
        ids += written if written else write(failed, n - len(ids)) if len(ids) < n else []
        return [archive.load(cid) for cid in ids[:n]]

    def write(failed: list[Rollout], missing: int) -> list[str]:
        tools = tool_specs(domain.toolbox(task), domain.brief)
        proposer = ProgramProposer(domain.knob_pool(), cfg.seed * 7919 - 1, task.inputs, tools)
        parents, brief, failures = [archive.load(incumbent)], full_brief(domain.brief), diagnose(failed)
        proposal = propose_new(archive, proposer, parents, missing, weights_version, brief, 0, failures)
        written = []
        for cand in proposal.candidates:
            if not validate.problems(cand.source):
                archive.add(replace(cand, hypothesis=f"{cand.hypothesis} [rescue]"), status=RESCUE)
                written.append(cand.id)
        return written

    return pool
