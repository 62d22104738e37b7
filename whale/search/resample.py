"""`schedule.method=harness-resample`: a control whose proposer returns the incumbent unchanged.

Every challenger is a copy of the incumbent's code, so none is better: each acceptance is a false one,
and the share of search iterations that change the harness measures the acceptance rule's false-
acceptance rate at the scale of a real run. A copy must draw its own random numbers (its `salt`):
under the common random numbers that candidates otherwise share, an identical file would reproduce
the incumbent's rollouts exactly and could never be accepted, and the control would measure nothing.
"""

from __future__ import annotations

from whale.harness.records import HarnessCandidate
from whale.search.proposer import Proposal, ProposalRequest


class ResampleProposer:
    name = "resample"

    def propose(self, request: ProposalRequest) -> Proposal:
        incumbent = request.parents[0]
        copies = []
        for _ in range(request.n):
            cid = request.next_id()
            hypothesis = f"resample: {incumbent.id} unchanged, with its own random numbers"
            copies.append(HarnessCandidate(cid, incumbent.source, incumbent.id, hypothesis, self.name, cid))
        return Proposal(copies, note=f"{len(copies)} copies of {incumbent.id}")
