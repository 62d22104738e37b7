"""`whale results --jobs N`: the studies' runs N at a time, each in a process of its own with its share of
the cores, so that a machine with more cores than one run uses finishes the edition sooner. Each run is
pinned to cores of its own: an engine that binds its threads to every core it may use (vLLM on the CPU)
would otherwise spin against its neighbour's.

Runs start in `whale results`' order (study by study, seed-major). A run is computed as without --jobs
(`make_run`); only its torch thread count differs, and its start record says which. A study waiting for
a pilot starts once the pilot's summary is complete. After every finished run, its study's summary is
rewritten, not yet complete, so that a lost machine (and its run folders) loses only the runs in flight;
once its last run has finished, `run_study` writes it complete. A run that fails is reported with its log,
and the others go on.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from whale.core.config import ConfigError
from whale.core.files import atomic_write_json
from whale.run.rundir import RunDir
from whale.studies.budget_pilot import study_config, waiting_for
from whale.studies.compare import RunData, load_run_data, run_folder
from whale.studies.plan import Study, summary_path
from whale.studies.running import held_runs, make_run, refuse_stale, run_study, summary_record


@dataclass(frozen=True)
class QueuedRun:
    study: Study
    method: str
    seed_offset: int
    folder: Path

    @property
    def name(self) -> str:
        return f"{self.study.name} {self.method} seed {self.seed_offset}"


def finished_run(folder: Path) -> bool:
    run = RunDir(folder)
    return run.is_run() and bool(run.read_state()["finished"])


def runs_left(study: Study, runs: Path, docs: Path) -> list[QueuedRun]:
    """The study's runs that neither a finished folder nor this edition's summaries hold, seed-major."""
    first_seed = study_config(study, docs).seed
    held = held_runs(docs, study)
    out = runs / study.runs_folder
    return [
        QueuedRun(study, m, i, run_folder(out, m, i))
        for i in range(study.seeds)
        for m in study.methods
        if (m, first_seed + i) not in held and not finished_run(run_folder(out, m, i))
    ]


def write_progress(study: Study, runs: Path, docs: Path) -> None:
    """The study's summary so far: this edition's held runs and its finished folders, not complete."""
    if waiting_for(study, docs):
        return
    cfg, held, out = study_config(study, docs), held_runs(docs, study), runs / study.runs_folder
    data: dict[str, list[RunData]] = {m: [] for m in study.methods}
    for i in range(study.seeds):
        for method in study.methods:
            run = held.get((method, cfg.seed + i))
            if run is None and finished_run(run_folder(out, method, i)):
                run = load_run_data(run_folder(out, method, i), method)
            if run is not None:
                data[method].append(run)
    summary_path(docs, study).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(summary_path(docs, study), summary_record(study, cfg, data, complete=False))


def holds(study: Study, runs: Path, queued: QueuedRun) -> bool:
    """Whether the queued run is one of the study's (a study sharing another's folder shares its runs)."""
    folders = {run_folder(runs / study.runs_folder, m, i) for m in study.methods for i in range(study.seeds)}
    return queued.folder in folders


def usable_cores() -> list[int]:
    """The cores this process may run on (all of them where the OS has no affinity calls: macOS)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def thread_share(jobs: int) -> int:
    return max(1, len(usable_cores()) // jobs)


def core_slots(jobs: int) -> list[frozenset[int]] | None:
    """The usable cores cut into `jobs` disjoint slots of `thread_share` cores, or None when there are
    fewer cores than jobs or no way to pin (the runs then share them all)."""
    cores, share = usable_cores(), thread_share(jobs)
    if len(cores) < jobs or not hasattr(os, "sched_setaffinity"):
        return None
    return [frozenset(cores[i * share : (i + 1) * share]) for i in range(jobs)]


def work_on(
    queued: QueuedRun, runs: Path, docs: Path, threads: int, log: Path, cores: frozenset[int] | None
) -> None:
    """In a worker process: make the run on `cores` (None: any) with `threads` torch threads, its output
    in `log`."""
    import torch

    if cores is not None:
        os.sched_setaffinity(0, cores)
    torch.set_num_threads(threads)
    with log.open("a") as out:
        out.write(f"on cores {usable_cores()}, {threads} torch thread(s)\n")
        out.flush()
        make_run(queued.study, runs, docs, queued.method, queued.seed_offset, Console(file=out, width=120))


def run_pool(
    studies: list[Study], runs: Path, docs: Path, console: Console, jobs: int, mixed_commits: bool = False
) -> list[Path]:
    """Make every run of `studies`, `jobs` at a time, and write each study's summary; returns the
    summaries' paths. Raises a ConfigError naming the failed runs, or the pilots a study still waits for."""
    threads, slots, logs = thread_share(jobs), core_slots(jobs), runs / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    pinned = f", pinned to cores {', '.join(str(sorted(s)) for s in slots)}" if slots else ""
    console.print(
        f"[bold]{jobs} runs at a time[/bold], {threads} torch thread(s) each{pinned}; logs in {logs}"
    )
    busy: dict[Future[None], QueuedRun] = {}
    slot_of: dict[Future[None], int] = {}
    failed: dict[Path, str] = {}
    summaries: dict[Study, Path] = {}
    checked: set[Study] = set()
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=spawn, max_tasks_per_child=1) as pool:
        while True:
            queue: list[QueuedRun] = []
            taken = {q.folder for q in busy.values()} | set(failed)
            for study in studies:
                if study in summaries or waiting_for(study, docs):
                    continue
                if study not in checked:
                    refuse_stale(study, docs, mixed_commits)
                    checked.add(study)
                left = runs_left(study, runs, docs)
                if not left:
                    summaries[study] = run_study(study, runs, docs, Console(quiet=True), mixed_commits)
                    console.print(f"summary of {study.name} written to {summaries[study]}")
                queue += [q for q in left if q.folder not in taken]
                taken |= {q.folder for q in left}
            for queued in queue[: jobs - len(busy)]:
                log = logs / f"{queued.study.name}-{queued.method}-seed{queued.seed_offset}.log"
                console.print(f"start {queued.name} -> {queued.folder} (log {log})")
                slot = min(set(range(jobs)) - set(slot_of.values()))
                future = pool.submit(
                    work_on, queued, runs, docs, threads, log, slots[slot] if slots else None
                )
                busy[future], slot_of[future] = queued, slot
            if not busy:
                break
            done, _ = wait(busy, return_when=FIRST_COMPLETED)
            for future in done:
                queued = busy.pop(future)
                del slot_of[future]
                if isinstance(future.exception(), BrokenProcessPool):
                    raise ConfigError(f"a worker died during {queued.name} (out of memory?); runs resume")
                if future.exception() is not None:
                    failed[queued.folder] = f"{queued.name}: {future.exception()}"
                else:
                    for study in (s for s in studies if s not in summaries and holds(s, runs, queued)):
                        write_progress(study, runs, docs)
                console.print(f"{'FAILED' if queued.folder in failed else 'finished'} {queued.name}")
    if failed:
        raise ConfigError(f"{len(failed)} run(s) failed ({'; '.join(failed.values())}); logs in {logs}")
    for study in studies:
        if study not in summaries:
            study_config(study, docs)  # raises: the pilots it waits for
    return [summaries[s] for s in studies]
