"""The edition's compute, planned before it is spent: every study in the order `make results` runs it, its
runs, how many are done, the hours those took, and an estimate for the rest.

An estimate is the mean wall time of committed runs of the same domain and schedule (2 CPU cores), this
edition's where it has some (earlier editions ran other defaults, which cost less), each scaled to the
study's run: its evaluations by the number of evaluation points, the rest by the budget (a run that did
not record its parts, all by the budget). Evaluations cost the same at any budget, so a pilot that
triples the budget does not triple the hours. Where no such run exists, the domain's runs stand in, then
all runs; the table names the basis of each estimate.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from whale.core.files import read_json
from whale.run.schedule import HARNESS_ONLY
from whale.studies.budget_pilot import study_config, waiting_for
from whale.studies.compare import md_table
from whale.studies.plan import EDITION, STUDIES, Study
from whale.studies.running import held_runs


@dataclass
class PlanRow:
    study: str
    runs: int  # runs of its own: a run shared with an earlier study is counted there
    done: int
    measured_s: float  # wall time of its runs that are done
    estimate_s: float  # for its runs still to do
    basis: str
    budget: str = ""  # its runs' budget rollouts, and whether a pilot still has to set it


def schedule_of(method: str) -> str:
    """The schedule whose cost a method's run resembles: its name before any `+`; controls as harness-only."""
    schedule = method.split("+")[0]
    return "harness-only" if schedule in HARNESS_ONLY else schedule


@dataclass(frozen=True)
class RunCost:
    """What one recorded run took: its wall time, budget, evaluation points, and its evaluations' share
    where it recorded its parts."""

    wall_s: float
    budget: int
    points: int
    eval_s: float | None = None
    edition: int = 1

    def scaled(self, budget: int, points: int) -> float:
        """Its wall time at another budget and number of evaluation points."""
        if self.eval_s is None:
            return self.wall_s * budget / self.budget
        rest = self.wall_s - self.eval_s
        return self.eval_s * points / max(1, self.points) + rest * budget / self.budget


def recorded_costs(docs: Path) -> dict[tuple[str, str], list[RunCost]]:
    """(domain, schedule) -> the cost of each run the committed summaries hold (a run kept by several
    summaries counted once)."""
    costs: dict[tuple[str, str], list[RunCost]] = defaultdict(list)
    seen: set[tuple[str, str, int, float]] = set()
    for path in sorted((docs / "results").glob("*.json")):
        meta = read_json(path)
        for r in meta["runs"]:
            run = (meta["domain"], r["method"], r["seed"], r["budget"]["wall_s"])
            if run not in seen:
                seen.add(run)
                evals = r["budget"].get("parts_s", {}).get("evaluations", {}).get("wall")
                wall, edition = r["budget"]["wall_s"], meta.get("edition", 1)
                cost = RunCost(wall, meta["budget_rollouts"], len(r["points"]), evals, edition)
                costs[(meta["domain"], schedule_of(r["method"]))].append(cost)
    return costs


def evaluation_points(budget: int, every: int) -> int:
    """The start, every `every` budget rollouts, and the end when it falls between."""
    return 1 + budget // every + (budget % every > 0)


def run_estimate(
    costs: dict[tuple[str, str], list[RunCost]], domain: str, method: str, budget: int, points: int
) -> tuple[float, str]:
    """Seconds one run should take, and what the estimate rests on: at the first level that has runs,
    this edition's if it has any, else those that recorded their parts if any did, else all of them."""
    schedule = schedule_of(method)
    for label, found in (
        (f"{domain} {schedule}", costs.get((domain, schedule), [])),
        (f"{domain}, any schedule", [c for (d, _), cs in costs.items() if d == domain for c in cs]),
        ("all runs", [c for cs in costs.values() for c in cs]),
    ):
        ours = [c for c in found if c.edition == EDITION]
        used = ours or [c for c in found if c.eval_s is not None] or found
        if used:
            count = f"{len(used)} of this edition" if ours else str(len(used))
            return statistics.fmean(c.scaled(budget, points) for c in used), f"{label} ({count})"
    return 0.0, "no runs recorded"


def plan_rows(docs: Path, studies: tuple[Study, ...] = STUDIES) -> list[PlanRow]:
    costs = recorded_costs(docs)
    seen: set[tuple[str, str, int]] = set()
    rows = []
    for study in studies:
        cfg = study_config(study, docs, pending_ok=True)
        held = held_runs(docs, study, planning=True)
        pending = " until its pilots" if waiting_for(study, docs) else ""
        row = PlanRow(study.name, 0, 0, 0.0, 0.0, "", f"{cfg.schedule.budget_rollouts}{pending}")
        bases = []
        for i in range(study.seeds):
            for method in study.methods:
                run_key = (study.runs_folder, method, cfg.seed + i)
                if run_key in seen:
                    continue
                seen.add(run_key)
                row.runs += 1
                run = held.get((method, cfg.seed + i))
                if run is not None:
                    row.done += 1
                    row.measured_s += run.budget["wall_s"]
                else:
                    budget, every = cfg.schedule.budget_rollouts, cfg.eval.every_rollouts
                    seconds, basis = run_estimate(
                        costs, cfg.domain.name, method, budget, evaluation_points(budget, every)
                    )
                    row.estimate_s += seconds
                    bases.append(basis)
        row.basis = "; ".join(dict.fromkeys(bases)) or "-"
        rows.append(row)
    return rows


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f}"


def section_plan(docs: Path, studies: tuple[Study, ...] = STUDIES) -> list[str]:
    rows = plan_rows(docs, studies)
    table = [
        [str(i), r.study, r.budget, str(r.runs), str(r.done)]
        + [hours(r.measured_s), hours(r.estimate_s), r.basis]
        for i, r in enumerate(rows, 1)
    ]
    total = [sum(getattr(r, name) for r in rows) for name in ("runs", "done", "measured_s", "estimate_s")]
    table.append(["", "all", "", str(total[0]), str(total[1]), hours(total[2]), hours(total[3]), ""])
    return [
        f"## Compute plan (edition {EDITION})",
        "",
        "The studies in the order `make results` runs them, at one commit, each run once (a run that "
        "several studies share counts in the first). Done: runs this edition's summaries hold, with their "
        "recorded hours. Left: estimated from the wall time of committed runs of the same domain and "
        "schedule (2 CPU cores), their evaluations scaled by the study's evaluation points and the rest by "
        "its budget. This edition's runs are preferred where it has some, since earlier editions ran other "
        "defaults (the fast engine in float32, on other CPUs: estimates from them run high); among earlier "
        "ones, runs that recorded these parts (the others scale whole with the budget). The last column "
        "names the runs behind each estimate. This edition's runs ran one at a time on a 2-core AMD EPYC "
        "Zen 4 (AVX-512, AVX512_BF16), on the default engine as `auto` decides there (vLLM; vLLM and the "
        "trainer in bfloat16; lockstep, with vLLM's engine core in whale's process): two at a time, one "
        "core each, finished about as many runs an "
        "hour (1.02x, docs/performance.md), so hours here are elapsed hours. A study's learning rate is "
        "the one the math rate pilots picked, and its budget is where its domain's pilot found weight-only "
        "flattened; until those pilots are done, the preset's stand in. `whale results --plan` "
        "prints this table without running anything.",
        "",
        md_table(
            ["order", "study", "budget", "runs", "done", "hours done", "hours left (est.)", "estimated from"],
            table,
        ),
        "",
    ]
