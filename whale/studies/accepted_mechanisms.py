"""Which of the program proposer's mechanisms the search tried and accepted, before any weight step and after
one, in each domain: the paper's claim (c) taken mechanism by mechanism (issue 33).

Read from the summaries' search iterations, which name each challenger's hypothesis (the program proposer's
starts with its mechanism key, e.g. `operands:calculator`). A challenger's gain is its search score minus the
incumbent's latest score (a re-evaluation under the current weights, or the last iteration's): descriptive
only, since a race may have scored a challenger on fewer tasks than the incumbent.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from whale.search.mechanisms import MECHANISMS
from whale.studies.beyond import decided
from whale.studies.claims import fisher_greater
from whale.studies.compare import RunData, md_table
from whale.studies.plan import StudySummary


@dataclass
class Tally:
    tried: int = 0
    accepted: int = 0
    gains: list[float] = field(default_factory=list)

    def cell(self) -> str:
        gain = f", gain {statistics.fmean(self.gains):+.3f}" if self.gains else ""
        return f"{self.accepted}/{self.tried}{gain}" if self.tried else "-"


@dataclass
class MechanismTally:
    before: Tally = field(default_factory=Tally)  # no weight step yet in the run
    after: Tally = field(default_factory=Tally)  # at least one weight step before the iteration


def mechanism_of(hypothesis: str) -> str:
    """The mechanism a program-proposer hypothesis names ("operands:calculator ..." -> "operands")."""
    return hypothesis.split(" ")[0].split(":")[0]


def tally_run(events: list[dict[str, Any]], into: dict[str, MechanismTally]) -> None:
    trained, incumbent_score = False, None
    for e in events:
        if e["event"] == "weight_step":
            trained = True
        elif e["event"] == "reeval":
            incumbent_score = e.get("score")
        elif e["event"] == "search_iteration":
            hypotheses = e.get("hypotheses") or {}
            if decided(e):
                for challenger, score in (e.get("candidates") or {}).items():
                    mechanism = mechanism_of(hypotheses.get(challenger, ""))
                    if mechanism not in MECHANISMS:
                        continue  # another proposer's, or a summary from before hypotheses were kept
                    side = into[mechanism]
                    tally = side.after if trained else side.before
                    tally.tried += 1
                    tally.accepted += bool(e.get("accepted")) and e.get("incumbent") == challenger
                    if incumbent_score is not None:
                        tally.gains.append(score - incumbent_score)
            incumbent_score = e.get("incumbent_score", incumbent_score)


def mechanism_tallies(runs: Iterable[RunData]) -> dict[str, MechanismTally]:
    tallies: dict[str, MechanismTally] = defaultdict(MechanismTally)
    for run in runs:
        tally_run(run.events, tallies)
    return dict(sorted(tallies.items()))


CONTROLS = ("harness-random", "harness-resample")  # challengers not picked by diagnosis, or not edits at all
OTHER_SEARCH = ("proposer.", "search.", "domain.minimal_seed")  # ablations of the search itself: left out


def domain_runs(summaries: list[StudySummary]) -> dict[str, list[RunData]]:
    """domain -> the runs whose search was the default one, each run once though several studies hold it."""
    out: dict[str, list[RunData]] = defaultdict(list)
    seen: set[tuple[str, str, int]] = set()
    for s in summaries:
        if any(o.startswith(OTHER_SEARCH) for o in s.study.overrides):
            continue
        family = [o.split("=", 1)[1] for o in s.study.overrides if o.startswith("domain.options.dataset=")]
        domain = " ".join([s.meta["domain"], *family])
        for method, runs in s.runs.items():
            for run in runs if method.split("+")[0] not in CONTROLS else []:
                key = (s.study.runs_folder, method, run.seed)
                if key not in seen:
                    seen.add(key)
                    out[domain].append(run)
    return dict(out)


def section_mechanisms(summaries: list[StudySummary]) -> list[str]:
    rows = []
    for domain, runs in domain_runs(summaries).items():
        for mechanism, t in mechanism_tallies(runs).items():
            p = fisher_greater(t.after.accepted, t.after.tried, t.before.accepted, t.before.tried)
            rows.append([domain, mechanism, t.before.cell(), t.after.cell(), f"{p:.3f}"])
    if not rows:
        return []
    return [
        "## Mechanisms: what the program proposer's search accepted, before and after a weight update",
        "",
        "Every challenger the program proposer wrote in a race that came to a decision, by domain and "
        "mechanism: accepted/tried, and its mean search-score gain over the incumbent's latest score "
        "(descriptive: a race may stop a challenger early). Before: no weight step yet in the run "
        "(harness-only, or whale's search before its first weight phase); after: at least one. p: one-sided "
        "Fisher exact test that acceptance is more frequent after than before (per mechanism, uncorrected). "
        "Runs that several studies share count once. Left out: the controls (harness-random, "
        "harness-resample) and the ablations of the search itself (proposer, acceptance, minimal seed).",
        "",
        md_table(
            ["domain", "mechanism", "before: accepted/tried", "after: accepted/tried", "p (after > before)"],
            rows,
        ),
        "",
    ]
