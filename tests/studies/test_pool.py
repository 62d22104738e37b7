"""`whale results --jobs N`: runs made in worker processes, each once even when two studies share it, the
summaries written as without --jobs (and, before a study is complete, after each of its finished runs),
and a failed run reported without stopping the others."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rich.console import Console

from tests.studies.test_running import TINY, held, write_summary
from whale.core.config import ConfigError
from whale.core.files import atomic_write_json, read_json
from whale.core.provenance import code_version, machine
from whale.studies.compare import run_folder
from whale.studies.plan import Study, summary_path
from whale.studies.pool import core_slots, run_pool, runs_left, thread_share


def finished_folder(folder: Path) -> None:
    folder.mkdir(parents=True)
    atomic_write_json(folder / "state.json", {"finished": True})


def test_runs_left_skips_finished_folders_and_held_runs_and_goes_seed_major(tmp_path):
    study = Study("s", "S", methods=("weight-only", "whale"), seeds=3, folder="s", **TINY)
    runs, docs = tmp_path / "runs", tmp_path / "docs"
    finished_folder(run_folder(runs / "s", "whale", 0))
    write_summary(docs, study, [held("weight-only", 1, code_version())], complete=False)
    left = [(q.method, q.seed_offset) for q in runs_left(study, runs, docs)]
    assert left == [("weight-only", 0), ("whale", 1), ("weight-only", 2), ("whale", 2)]


@pytest.mark.slow
def test_two_at_a_time_makes_each_run_once_keeps_what_finished_and_reports_a_failed_one(tmp_path):
    runs, docs = tmp_path / "runs", tmp_path / "docs"
    budget = ("schedule.budget_rollouts=16", "eval.every_rollouts=16")
    short = dict(TINY, overrides=(*TINY["overrides"], *budget))
    wide = Study("wide", "W", methods=("weight-only",), seeds=2, folder="w", **short)
    narrow = Study("narrow", "N", methods=("weight-only",), seeds=1, folder="w", **short)
    broken = Study("broken", "B", methods=("weight-only",), seeds=2, folder="b", **short)
    foreign = run_folder(runs / "b", "weight-only", 0)  # holds another config: ensure_run refuses it
    foreign.mkdir(parents=True)
    (foreign / "config.yaml").write_text("seed: 99\n")
    atomic_write_json(foreign / "state.json", {"finished": False})
    console = Console(record=True, width=300)
    failure = r"1 run\(s\) failed \(broken weight-only seed 0: .*different config"
    with pytest.raises(ConfigError, match=failure):
        run_pool([broken, wide, narrow], runs, docs, console, jobs=2)
    text = console.export_text()
    assert text.count("start ") == 4 and "start narrow" not in text  # narrow's run is wide's seed 0
    for study in (wide, narrow):
        assert read_json(summary_path(docs, study))["complete"]
    assert [r["machines"] for r in read_json(summary_path(docs, wide))["runs"]] == [[machine()]] * 2
    so_far = read_json(summary_path(docs, broken))  # its seed 1 finished: a lost machine keeps it
    assert not so_far["complete"] and len(so_far["runs"]) == 1
    on_a_new_machine = [(q.method, q.seed_offset) for q in runs_left(broken, tmp_path / "new", docs)]
    assert on_a_new_machine == [("weight-only", 0)]
    log = (runs / "logs" / "wide-weight-only-seed1.log").read_text()
    assert f"{thread_share(2)} torch thread(s)" in log and "running into" in log
    slots = core_slots(2)
    if slots is not None:  # each run on one slot; the first two, started at once, on both
        assert "pinned to cores" in text
        named = [
            {slot for slot in slots if f"on cores {sorted(slot)}," in log.read_text()}
            for log in (runs / "logs").glob("*.log")
        ]
        assert len(named) == 4 and all(len(n) == 1 for n in named) and set.union(*named) == set(slots)


def test_core_slots_cut_the_usable_cores_into_disjoint_shares():
    cores = sorted(os.sched_getaffinity(0))
    assert core_slots(1) == [frozenset(cores)]
    each = core_slots(len(cores))
    assert each == [frozenset({c}) for c in cores]
    assert core_slots(len(cores) + 1) is None  # more runs than cores: they share
    if len(cores) >= 4:
        halves = core_slots(2)
        assert halves[0].isdisjoint(halves[1]) and len(halves[0]) == len(cores) // 2
