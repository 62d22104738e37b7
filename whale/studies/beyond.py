"""Tables for the studies beyond the paper (issue 32), read from the summaries' unit events: what rescue
found and trained on, which side the gain-driven schedule spent its phases on and why, and how often the
harness-resample control accepted a copy of the incumbent."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Any

from whale.search.race import NO_DECISION
from whale.studies.compare import RunData, md_table
from whale.studies.plan import StudySummary

UNITS = {"weight_step": "W", "search_iteration": "H"}


def phase_sequence(events: list[dict[str, Any]]) -> str:
    """The run's units in order with runs collapsed: 'W2 H1 W3' is two weight steps, one search
    iteration, three weight steps."""
    marks = [UNITS[e["event"]] for e in events if e["event"] in UNITS]
    return " ".join(f"{mark}{len(list(group))}" for mark, group in itertools.groupby(marks))


def side_rollouts(events: list[dict[str, Any]]) -> tuple[int, int]:
    """Budget rollouts spent by weight steps and by the search (its iterations and re-evaluations)."""
    weights = sum(int(e.get("total", 0)) for e in events if e["event"] == "weight_step")
    search = sum(int(e.get("spent", 0)) for e in events if e["event"] in ("search_iteration", "reeval"))
    return weights, search


def choice_counts(events: list[dict[str, Any]]) -> str:
    """How the run's phase switches were decided: the part of each switch's reason before its numbers."""
    counts = Counter(str(e.get("reason", "")).split(":")[0] for e in events if e["event"] == "phase_switch")
    return ", ".join(f"{why} {n}" for why, n in sorted(counts.items())) or "-"


def gain_rows(runs: dict[str, list[RunData]]) -> list[list[str]]:
    rows = []
    for method, seeds in runs.items():
        for run in seeds:
            weights, search = side_rollouts(run.events)
            accepted = sum(1 for e in run.events if e["event"] == "search_iteration" and e.get("accepted"))
            iterations = sum(1 for e in run.events if e["event"] == "search_iteration")
            rows.append(
                [
                    method,
                    str(run.seed),
                    phase_sequence(run.events),
                    f"{weights} / {search}",
                    f"{accepted} of {iterations}",
                    choice_counts(run.events),
                ]
            )
    return rows


def section_gain(s: StudySummary) -> list[str]:
    head = ["method", "seed", "units in order", "rollouts: weights / search", "accepted", "phase switches"]
    return [
        f"Schedules ({s.study.name}): each run's units in order (W weight steps, H search iterations), "
        "the budget rollouts each side spent, challengers accepted, and what decided each phase switch "
        "(whale-gain: `probe` runs each side once, `explore` a side left out too long, `gain` the side "
        "whose Thompson draw of recent gain per rollout was larger, on val or on the phases' signals).",
        "",
        md_table(head, gain_rows(s.runs)),
        "",
    ]


def rescue_totals(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The run's weight-step rescue records summed; None when rescue was off."""
    records = [e["rescue"] for e in events if e["event"] == "weight_step" and e.get("rescue")]
    if not records:
        return None
    totals: dict[str, Any] = {k: sum(int(r[k]) for r in records) for k in ("zero_signal", "tried", "rescued")}
    totals |= {k: sum(int(r[k]) for r in records) for k in ("rollouts", "examples")}
    totals["harnesses"] = len({h for r in records for h in r.get("by_harness", {})})
    for key in ("skipped", "targets"):
        counts: Counter[str] = Counter()
        for r in records:
            counts.update(r.get(key) or {})
        totals[key] = ", ".join(f"{name} {n}" for name, n in sorted(counts.items())) or "-"
    return totals


def sampled_groups(events: list[dict[str, Any]]) -> int:
    """Training tasks the weight steps sampled under the incumbent."""
    return sum(sum(e.get("harnesses", {}).values()) for e in events if e["event"] == "weight_step")


def rescue_rows(runs: dict[str, list[RunData]]) -> list[list[str]]:
    rows = []
    for method, seeds in runs.items():
        for run in seeds:
            t = rescue_totals(run.events)
            sampled = sampled_groups(run.events)
            if t is None:
                rows.append([method, str(run.seed), f"- of {sampled}", *["-"] * 7])
                continue
            rows.append(
                [
                    method,
                    str(run.seed),
                    f"{t['zero_signal']} of {sampled}",
                    str(t["tried"]),
                    str(t["rescued"]),
                    str(t["harnesses"]),
                    str(t["rollouts"]),
                    str(t["examples"]),
                    t["targets"],
                    t["skipped"],
                ]
            )
    return rows


def section_rescue(s: StudySummary) -> list[str]:
    head = ["method", "seed", "zero-signal tasks (of sampled)", "tried", "rescued", "rescuing harnesses"]
    head += ["rescue rollouts", "rescue examples", "distill targets", "distill skips"]
    return [
        f"Rescue ({s.study.name}), summed over each run's weight steps: (step, task) groups none of whose "
        "samples under the incumbent passed, how many were run under rescue harnesses, how many passed "
        "there at least once and under how many distinct harnesses, the rollouts this charged to the "
        "budget, the training examples it made, the targets distill's examples were built from (runs "
        "before replayed targets existed show -), and passing rollouts distill could not use (rescue off "
        "does not count its zero-signal groups).",
        "",
        md_table(head, rescue_rows(s.runs)),
        "",
    ]


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate: unlike the normal one, sane at 0 of n."""
    if n == 0:
        return 0.0, 1.0
    p, spread = hits / n, z * z / n
    centre = (p + spread / 2) / (1 + spread)
    half = z * math.sqrt(p * (1 - p) / n + spread / (4 * n)) / (1 + spread)
    return max(0.0, centre - half), min(1.0, centre + half)


def decided(event: dict[str, Any]) -> bool:
    """A race the budget cut short could not accept anyone, whether or not it scored its challengers."""
    return bool(event.get("candidates")) and not str(event.get("reason", "")).startswith(NO_DECISION)


def acceptance_counts(events: list[dict[str, Any]]) -> tuple[int, int, int]:
    """Search iterations whose race came to a decision, the challengers raced in them, and the
    iterations that changed the harness."""
    done = [e for e in events if e["event"] == "search_iteration" and decided(e)]
    challengers = sum(len(e["candidates"]) for e in done)
    return len(done), challengers, sum(1 for e in done if e.get("accepted"))


def section_controls(s: StudySummary) -> list[str]:
    """harness-resample: every challenger is a copy of the incumbent, so every acceptance is false."""
    runs = [(method, run) for method, rs in s.runs.items() for run in rs]
    counts = [(method, run.seed, *acceptance_counts(run.events)) for method, run in runs]
    accepted, iterations = sum(row[4] for row in counts), sum(row[2] for row in counts)
    low, high = wilson(accepted, iterations)
    rate = accepted / iterations if iterations else 0.0
    return [
        f"False acceptances ({s.study.name}): each challenger is the incumbent's own file with its own "
        "random numbers, so an iteration that changed the harness accepted a candidate no better than the "
        f"one it replaced. Pooled over the runs: {accepted} of {iterations} iterations, {rate:.1%} "
        f"[95% Wilson {low:.1%}, {high:.1%}], treating iterations as independent.",
        "",
        md_table(
            ["method", "seed", "iterations that decided", "challengers", "accepted (false)"],
            [[str(x) for x in row] for row in counts],
        ),
        "",
    ]


def section_beyond(s: StudySummary) -> list[str]:
    """The study's own table: schedules for a whale-gain study, rescue counts for a rescue study, false
    acceptances for the harness-resample control."""
    methods = list(s.runs)
    out = section_gain(s) if any(m.startswith("whale-gain") for m in methods) else []
    if any("+on_policy" in m or "+distill" in m for m in methods):
        out += section_rescue(s)
    if "harness-resample" in methods:
        out += section_controls(s)
    return out
