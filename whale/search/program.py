"""`proposer.kind=program`: an offline proposer that writes whole mechanisms, not only constants.

It reads the incumbent's failure diagnosis under the current weights (whale/search/diagnosis.py) and
tries first the mechanisms (whale/search/mechanisms.py) that address the most frequent failures: a retry
for crashes and empty answers, snapping for answers outside the listed options, handing the arithmetic
to a tool, demonstrations and self-consistency for wrong values. A mechanism the incumbent already has
is not stacked again. Slots left over go to the knob mutator (prompt rewording and constants), so an
iteration always has candidates.
"""

from __future__ import annotations

import random
from typing import Any

from whale.harness import validate
from whale.harness.records import HarnessCandidate
from whale.search.archive import RESCUE, Archive
from whale.search.mechanisms import MECHANISMS, Context, apply, present, variants
from whale.search.mutation import MutationProposer
from whale.search.proposer import Proposal, ProposalRequest
from whale.search.toolspec import ToolSpec

# failure kind -> the mechanisms that address it, most direct first
REMEDIES = {
    "crash": ("retry",),
    "tool error": ("retry", "delegate"),
    "empty reply": ("retry", "votes"),
    "no answer": ("retry", "snap", "votes"),
    "outside candidates": ("snap", "delegate"),
    "wrong value": ("operands", "demos", "votes", "delegate", "plan"),
    "timeout": (),
}
MAX_DEMOS = 3


def bootstrap_demos(archive: Archive, weights_version: str, limit: int = MAX_DEMOS) -> list[dict[str, str]]:
    """Worked examples from rollouts the verifier passed under these weights. The archive holds only
    search-split rollouts (validation and test rollouts live in the run's evals/, which no proposer
    reads), so no example can come from a validation or test task."""
    found: list[dict[str, str]] = []
    for cid in archive.ids():
        for trace in archive.traces(cid, weights_version):
            if trace["reward"] < 1.0 or trace["error"] or not trace["calls"]:
                continue
            last = trace["calls"][-1]
            users = [m["content"] for m in last["messages"] if m["role"] == "user"]
            if not users or not last["text"].strip() or any(d["user"] == users[-1] for d in found):
                continue
            found.append({"task": trace["task_id"], "user": users[-1], "reply": last["text"]})
            if len(found) == limit:
                return found
    return found


def tried_on(archive: Archive, parent: str) -> set[str]:
    """Mechanisms this proposer has already applied to `parent` (each gives the same file again); a
    weight step's rescue harnesses were never searched, so they do not count."""
    tried = set()
    for cid in archive.ids():
        meta = archive.meta(cid)
        if meta["parent"] == parent and meta["proposer"] == ProgramProposer.name and meta["status"] != RESCUE:
            tried.add(meta["hypothesis"].split(" ")[0])
    return tried


def ranked_mechanisms(failures: dict[str, int], rng: random.Random) -> list[str]:
    """Mechanisms by the failures they address, the i-th remedy of a kind counting 1/(i+1) of its
    failures (most first); the rest after them, in random order."""
    weight = {name: 0.0 for name in MECHANISMS}
    for kind, count in failures.items():
        for place, name in enumerate(REMEDIES.get(kind, ())):
            weight[name] += count / (place + 1)
    names = list(MECHANISMS)
    rng.shuffle(names)
    return sorted(names, key=lambda name: -weight[name])


class ProgramProposer:
    name = "program"

    def __init__(
        self,
        pool: dict[str, list[Any]],
        seed: int,
        inputs: dict[str, Any],
        tools: list[ToolSpec] | None = None,
        random_order: bool = False,
    ):
        self.rng = random.Random(seed)
        self.mutation = MutationProposer(pool, seed=seed)
        self.inputs = inputs  # one search task's inputs: the shape every task's inputs share
        self.tools = tools or []  # the domain's tools: names, parameters, whether one lists options
        self.random_order = random_order  # the harness-random control: mechanisms not picked by diagnosis

    def shuffled(self, keys: list[str]) -> list[str]:
        """A mechanism's variants (one per tool) in random order, so iterations try different tools."""
        self.rng.shuffle(keys)
        return keys

    def propose(self, request: ProposalRequest) -> Proposal:
        incumbent = request.parents[0]
        history = [
            e
            for e in request.archive.eval_history(incumbent.id)
            if e.weights_version == request.weights_version
        ]
        ev = history[-1] if history else None
        failures = request.failures if request.failures is not None else ev.failures if ev else {}
        failures = {} if self.random_order else failures
        ctx = Context(
            self.inputs,
            ev.calls_per_rollout if ev else 1.0,
            bootstrap_demos(request.archive, request.weights_version),
            self.tools,
        )
        tried = tried_on(request.archive, incumbent.id)
        out: list[HarnessCandidate] = []
        ranked = ranked_mechanisms(failures, self.rng)
        keys = [key for name in ranked for key in self.shuffled(variants(name, ctx))]
        for key in keys:
            if len(out) == request.n:
                break
            if present(key, incumbent.source) or key in tried:
                continue
            source = apply(key, incumbent.source, ctx)
            if source is None or validate.problems(source):
                continue
            name = key.partition(":")[0]
            why = (
                ", ".join(f"{k} {n}" for k, n in failures.items() if name in REMEDIES.get(k, ())) or "untried"
            )
            out.append(HarnessCandidate(request.next_id(), source, incumbent.id, f"{key} ({why})", self.name))
        if len(out) < request.n:
            out += self.mutation.mutants(request.parents, request.seen, request.n - len(out), request.next_id)
        mechanisms = [c.hypothesis.split(" ")[0] for c in out if c.proposer == self.name]
        return Proposal(out, note=f"mechanisms {', '.join(mechanisms) or 'none'}; {len(out)} candidates")
