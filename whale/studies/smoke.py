"""Every distinct run of the plan once, tiny: the check before an edition spends its run-hours.

A fix to anything a run executes means re-running the edition (docs/decisions.md), so a path that breaks
only in a rarely run study (a control, a rescue mode, an ablation) should break in minutes, not 40
run-hours in. Each distinct (preset, method, overrides) of the chosen studies runs once with the tiny
model at a small budget, in reverse plan order so that the rarely run paths come first. Runs go under a
folder named for the code version, where a finished run is not run again; one that fails is reported in
a line and the rest go on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from whale.core.config import load_config
from whale.core.provenance import code_version
from whale.studies.budget_pilot import study_overrides
from whale.studies.compare import ensure_run, method_config
from whale.studies.plan import Study

# The tiny model at a budget that reaches every phase once (two weight steps, a search, two evaluations).
TINY = (
    "model.name=tiny", "sampling.max_tokens=12", "schedule.budget_rollouts=96", "eval.every_rollouts=48",
    "eval.k=2", "eval.cross=off", "rft.tasks_per_step=4", "rft.k=4", "runner.workers=4",
    "domain.sizes.train=40", "domain.sizes.search=6", "domain.sizes.val=6", "domain.sizes.test=6",
)  # fmt: skip
SCALE = ("schedule.budget_rollouts=", "eval.every_rollouts=")  # a study's scale: TINY sets its own


@dataclass(frozen=True)
class SmokeRun:
    study: str  # the first study (in reverse plan order) that has this run
    preset: str
    method: str
    overrides: tuple[str, ...]

    @property
    def folder(self) -> str:
        return f"{self.study}-{self.method}"


def distinct_runs(studies: list[Study], docs: Path) -> list[SmokeRun]:
    """The studies' distinct runs, rarest paths first: reverse plan order, each (preset, method, overrides)
    once, with the overrides a pilot would set (the preset's while it has not finished)."""
    out, seen = [], set()
    for study in reversed(studies):
        overrides = tuple(o for o in study_overrides(study, docs, pending_ok=True) if not o.startswith(SCALE))
        for method in study.methods:
            key = (study.preset, method, tuple(sorted(overrides)))
            if key not in seen:
                seen.add(key)
                out.append(SmokeRun(study.name, study.preset, method, overrides))
    return out


def smoke(
    studies: list[Study], docs: Path, out: Path, console: Console, tiny: tuple[str, ...] = TINY
) -> list[tuple[SmokeRun, str]]:
    """Run each distinct run tiny into `out`/<code version>; (run, 'ok' or 'failed: <why>') for each."""
    runs, version = distinct_runs(studies, docs), code_version()
    results = []
    for i, run in enumerate(runs, 1):
        try:
            cfg = method_config(load_config(run.preset, None, [*run.overrides, *tiny]), run.method, 0)
            ensure_run(cfg, out / version / run.folder, Console(quiet=True))
            status = "ok"
        except Exception as exc:  # noqa: BLE001 - a broken path is what this looks for; the rest go on
            status = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        results.append((run, status))
        console.print(f"[{i}/{len(runs)}] {run.study} {run.method}: {status}", highlight=False, markup=False)
    return results
