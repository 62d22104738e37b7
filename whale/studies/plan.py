"""The studies behind docs/results.md: which presets, methods, seeds and overrides each runs, and the
small summary each keeps."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whale.core.config import ConfigError
from whale.core.files import read_json
from whale.studies.compare import (
    RunData,
)

SIX = ("whale", "whale-adaptive", "weight-only", "harness-only", "stagewise", "fast-slow")

# The results edition a summary belongs to. The second (issue 33) runs every study at one commit with five
# seeds; summaries written before the field existed are the first edition's, rendered as they are.
EDITION = 2
DOMAINS = ("math", "searchqa", "chess")


@dataclass(frozen=True)
class Study:
    """One `whale compare` invocation: a preset, overrides, methods and seeds."""

    name: str  # docs/results/<name>.json
    title: str
    preset: str
    methods: tuple[str, ...]
    seeds: int = 5
    overrides: tuple[str, ...] = ()
    folder: str = ""  # run folder under --runs; studies that share runs name the same folder

    @property
    def runs_folder(self) -> str:
        return self.folder or self.name


PHASE_ABLATION = {  # label -> (E weight steps, I search iterations); (2, 1) is the math study's whale
    "E2-I1": (2, 1),
    "E2-I3": (2, 3),
    "E6-I1": (6, 1),
    "E6-I3": (6, 3),
}


# weights.lr under weight-only on math: the rate pilots below are the sweep, and every other study takes the
# pick. (A separate sweep at the math budget repeated them: the pilots run at least that long.)
LR_SWEEP = ("1e-4", "3e-4", "1e-3")

DOMAIN_TITLES = {"math": "Math", "searchqa": "Search QA", "chess": "Chess"}

# Three reasoning-gym families, by the rule docs/domains.md stated before any of their runs: seed mean@4 in
# [0.02, 0.40] and a sample solved (docs/bench/2026-12-05-gym-scores.json); the family with the most solved
# samples in each of reasoning-gym's task kinds; the three kinds whose pick solved most (ties: higher mean).
# tests/studies/test_plan.py applies the rule to the committed scores.
GYM_FAMILIES = ("isomorphic_strings", "knights_knaves", "number_format")

# Pilots, run first, at three times the results presets' budget. On math, weight-only at each rate of the
# sweep: the rate is picked on validation, each rate read up to where its own curve flattened, and the math
# budget is where the picked rate's curve flattened (a rate that collapses early cannot win by being read
# late, nor lose by being run long). The other domains' pilots run at the picked rate. Studies read their
# rate and budget from the pilots' summaries when they run (whale/studies/budget_pilot.py), so the edition
# stays at one commit.
PILOT_BUDGET = ("schedule.budget_rollouts=2304", "eval.every_rollouts=384")
RATE_PILOTS: tuple[Study, ...] = tuple(
    Study(
        f"math-budget-{lr}",
        f"Math: weight-only at learning rate {lr} and three times the budget (a rate and budget pilot)",
        "results-math",
        ("weight-only",),
        seeds=3,
        overrides=(*PILOT_BUDGET, f"weights.lr={lr}"),
    )
    for lr in LR_SWEEP
)
PILOTS: tuple[Study, ...] = (
    *RATE_PILOTS,
    *(
        Study(
            f"{domain}-budget",
            f"{DOMAIN_TITLES[domain]}: weight-only at the picked rate, three times the budget (budget pilot)",
            f"results-{domain}",
            ("weight-only",),
            seeds=3,
            overrides=PILOT_BUDGET,
        )
        for domain in DOMAINS
        if domain != "math"
    ),
)

# Beyond the paper (issue 32): rescue of zero-signal tasks under each schedule, the gain-driven schedule, and
# the controls (harness-resample: every acceptance is a false one; harness-random: mechanisms undiagnosed).
# They run in their domain's folder, so the plain weight-only and whale runs are the domain study's own.
BEYOND: tuple[Study, ...] = (
    *(
        Study(
            f"{domain}-rescue-{schedule}",
            f"{DOMAIN_TITLES[domain]}: rescue off, on_policy and distill under {schedule}",
            f"results-{domain}",
            (schedule, f"{schedule}+on_policy", f"{schedule}+distill"),
            folder=domain,
        )
        for domain in DOMAINS
        for schedule in ("weight-only", "whale")
    ),
    *(
        Study(
            f"{domain}-gain",
            f"{DOMAIN_TITLES[domain]}: the gain-driven schedule (whale-gain) against whale",
            f"results-{domain}",
            ("whale", "whale-gain"),
            folder=domain,
        )
        for domain in DOMAINS
    ),
    *(
        Study(
            f"{domain}-resample",
            f"{DOMAIN_TITLES[domain]}: the harness-resample control (every acceptance is a false one)",
            f"results-{domain}",
            ("harness-resample",),
            folder=domain,
        )
        for domain in DOMAINS
    ),
    *(
        Study(
            f"{domain}-random",
            f"{DOMAIN_TITLES[domain]}: harness-only against harness-random (mechanisms in random order)",
            f"results-{domain}",
            ("harness-only", "harness-random"),
            folder=domain,
        )
        for domain in DOMAINS
    ),
)

# Ablations a reader asks for first (issue 33), each in a folder of its own since its config differs.
ABLATIONS: tuple[Study, ...] = (
    Study(
        "math-proposer-mutation",
        "Math: the mutation proposer (constants only) in place of the program proposer",
        "results-math",
        ("whale", "harness-only"),
        overrides=("proposer.kind=mutation",),
    ),
    Study(
        "math-acceptance-argmax",
        "Math: the paper's argmax acceptance in place of the race",
        "results-math",
        ("whale", "harness-only"),
        overrides=("search.acceptance=argmax",),
    ),
    *(
        Study(
            f"{domain}-minimal",
            f"{DOMAIN_TITLES[domain]}: the minimal-prompt seed in place of the seed harness",
            f"results-{domain}",
            ("whale", "weight-only"),
            overrides=("domain.minimal_seed=true",),
        )
        for domain in DOMAINS
    ),
)

# Beyond the paper's domains: whale, weight-only and harness-only on the chosen reasoning-gym families.
GYM: tuple[Study, ...] = tuple(
    Study(
        f"gym-{family}",
        f"reasoning-gym {family}: whale, weight-only and harness-only",
        "results-gym",
        ("whale", "weight-only", "harness-only"),
        overrides=(f"domain.options.dataset={family}",),
    )
    for family in GYM_FAMILIES
)


STUDIES: tuple[Study, ...] = (
    *PILOTS,
    Study("math", "Math word problems", "results-math", SIX),
    Study("searchqa", "Multi-hop search QA", "results-searchqa", SIX),
    Study("chess", "Chess mate-in-one", "results-chess", SIX),
    Study(
        "math-algorithms",
        "Math: the weight phase's algorithm (RFT, DPO, GRPO) under whale",
        "results-math",
        ("whale", "whale+dpo", "whale+grpo"),
        folder="math",
    ),
    *(
        Study(
            f"math-phases-{label}",
            f"Math: whale with E={e} weight steps and I={i} search iterations per phase",
            "results-math",
            ("whale",),
            overrides=(f"schedule.weight_steps={e}", f"schedule.search_iters={i}"),
            folder="math" if (e, i) == (2, 1) else f"math-phases-{label}",
        )
        for label, (e, i) in PHASE_ABLATION.items()
    ),
    *BEYOND,
    *ABLATIONS,
    *GYM,
)


def summary_path(docs: Path, study: Study) -> Path:
    return docs / "results" / f"{study.name}.json"


@dataclass
class StudySummary:
    study: Study
    meta: dict[str, Any]
    runs: dict[str, list[RunData]] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return int(self.meta["k"])


def load_summary(docs: Path, study: Study, partial: bool = False) -> StudySummary | None:
    """The study's summary; None when there is none, or when it is still being written (a run of the
    study is missing) and `partial` is not set."""
    path = summary_path(docs, study)
    if not path.is_file():
        return None
    meta = read_json(path)
    if not partial and not meta.get("complete", True):  # first-edition summaries were written whole
        return None
    runs: dict[str, list[RunData]] = {m: [] for m in meta["methods"]}
    for r in meta.pop("runs"):
        runs[r["method"]].append(RunData(**r))
    return StudySummary(study, meta, runs)


def not_yet(docs: Path, study: Study) -> str:
    """What a study without a complete summary has done so far, in one line."""
    partial = load_summary(docs, study, partial=True)
    command = f"`whale results --study {study.name}`"
    if partial is None:
        return f"Not run yet ({command})."
    done, planned = sum(map(len, partial.runs.values())), len(study.methods) * study.seeds
    return (
        f"In progress: {done} of {planned} runs have finished ({command} goes on); the section appears "
        "once all have, so that no figure rests on part of the seeds."
    )


def select_studies(names: list[str] | None) -> list[Study]:
    if not names:
        return list(STUDIES)
    known = {s.name: s for s in STUDIES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"--study: unknown study {unknown[0]!r}; known: {', '.join(known)}")
    return [known[n] for n in names]
