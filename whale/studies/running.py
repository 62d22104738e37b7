"""Running a study run by run, with its summary written after each one, so that an edition that takes many
sittings (and many machines) loses nothing: a run the committed summary already holds is not run again.

A summary is rewritten after every run, marked `complete` only when all of its runs are in. A run is
taken from a summary of this edition only (`EDITION`), from this study's own or from a study that shares
its run folder and config, and only when it ran at the commit this checkout is at: one edition, one commit.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from whale.core.config import Config, ConfigError
from whale.core.files import atomic_write_json
from whale.core.provenance import code_version
from whale.studies.budget_pilot import study_config
from whale.studies.compare import (
    RunData,
    ensure_run,
    lending_runs,
    load_run_data,
    method_config,
    run_folder,
)
from whale.studies.plan import EDITION, STUDIES, Study, load_summary, summary_path


def commits_of(runs: list[RunData]) -> list[str]:
    """The code versions a study's runs ran at, in first-seen order ("not recorded" for older runs)."""
    seen = [c for r in runs for c in (r.commits or ["not recorded"])]
    return list(dict.fromkeys(seen))


def refuse_mixed_commits(name: str, runs: list[RunData], out: Path, allowed: bool) -> None:
    commits = commits_of(runs)
    if len(commits) > 1 and not allowed:
        raise ConfigError(
            f"study {name}: its runs ran at different commits ({', '.join(commits)}); re-run them at one "
            f"commit (delete {out}) or pass --mixed-commits, and the document will list them"
        )


def sharing(study: Study, docs: Path, planning: bool = False) -> list[Study]:
    """The study itself and those whose runs are the same runs: same folder, same config (budgets are
    the pilots', so read from `docs`)."""
    config = study_config(study, docs, planning).model_dump()
    same = [
        s
        for s in STUDIES
        if s.runs_folder == study.runs_folder
        and s != study
        and study_config(s, docs, planning).model_dump() == config
    ]
    return [study, *same]


def held_runs(docs: Path, study: Study, planning: bool = False) -> dict[tuple[str, int], RunData]:
    """(method, seed) -> run, from this edition's summaries of the study and of studies sharing its runs.
    A summary at another budget than the study's (its pilot was re-run) is refused; a plan (`planning`,
    where pilots may be pending) counts its runs as still to do."""
    held: dict[tuple[str, int], RunData] = {}
    budget = study_config(study, docs, planning).schedule.budget_rollouts
    for s in sharing(study, docs, planning):
        summary = load_summary(docs, s, partial=True)
        if summary is not None and summary.meta.get("edition") == EDITION:
            if summary.meta.get("budget_rollouts", budget) != budget:
                if planning:
                    continue
                raise ConfigError(
                    f"study {study.name}: {summary_path(docs, s)} holds runs at budget "
                    f"{summary.meta['budget_rollouts']}, the study now runs at {budget}; delete that summary"
                )
            for runs in summary.runs.values():
                held.update({(r.method, r.seed): r for r in runs if (r.method, r.seed) not in held})
    return held


def summary_record(
    study: Study, cfg: Config, data: dict[str, list[RunData]], complete: bool
) -> dict[str, Any]:
    return {
        "study": study.name,
        "title": study.title,
        "edition": EDITION,
        "complete": complete,
        "preset": study.preset,
        "overrides": list(study.overrides),
        "domain": cfg.domain.name,
        "k": cfg.eval.k,
        "budget_rollouts": cfg.schedule.budget_rollouts,
        "seeds": study.seeds,
        "methods": list(study.methods),
        "runs": [asdict(r) for rs in data.values() for r in rs],
    }


def refuse_stale(study: Study, docs: Path, mixed_commits: bool) -> None:
    """Refuse, before anything runs, a study whose summary holds runs at another commit than this one."""
    stale = [c for c in commits_of(list(held_runs(docs, study).values())) if c != code_version()]
    if stale and not mixed_commits:
        raise ConfigError(
            f"study {study.name}: its summary holds runs at {', '.join(stale)}, this checkout is at "
            f"{code_version()}; run at that commit (git worktree add) or pass --mixed-commits"
        )


def make_run(study: Study, runs: Path, docs: Path, method: str, seed_offset: int, console: Console) -> Path:
    """Run or resume one of the study's runs (its siblings of the same seed may lend their start
    evaluation); returns its folder."""
    out = runs / study.runs_folder
    lenders = [runs / s.runs_folder for s in STUDIES if s.preset == study.preset]
    siblings = lending_runs(out, list(study.methods), seed_offset, lenders)
    folder = run_folder(out, method, seed_offset)
    ensure_run(method_config(study_config(study, docs), method, seed_offset), folder, console, siblings)
    return folder


def run_study(study: Study, runs: Path, docs: Path, console: Console, mixed_commits: bool = False) -> Path:
    """Run, resume or reuse each of the study's runs (seed-major), writing its summary after each; returns
    the summary's path. Runs held by a summary at another commit, or run at different commits, are refused
    unless `mixed_commits` (the document then lists the commits)."""
    cfg = study_config(study, docs)
    refuse_stale(study, docs, mixed_commits)
    held = held_runs(docs, study)
    data: dict[str, list[RunData]] = {m: [] for m in study.methods}
    path = summary_path(docs, study)
    path.parent.mkdir(parents=True, exist_ok=True)
    total = study.seeds * len(study.methods)
    for i in range(study.seeds):
        for j, method in enumerate(study.methods):
            run = held.get((method, cfg.seed + i))
            console.print(f"[bold]study {study.name}[/bold]: run {i * len(study.methods) + j + 1} of {total}")
            if run is None:
                run = load_run_data(make_run(study, runs, docs, method, i, console), method)
            else:
                console.print(f"[bold]{method}[/bold] seed {run.seed}: held by the summary, not run again")
            data[method].append(run)
            atomic_write_json(path, summary_record(study, cfg, data, complete=False))
    out = runs / study.runs_folder
    refuse_mixed_commits(study.name, [r for rs in data.values() for r in rs], out, mixed_commits)
    atomic_write_json(path, summary_record(study, cfg, data, complete=True))
    return path
