"""Running a study run by run: the summary is written after each run, a run this edition's summary holds
is not run again, and runs at another commit are refused."""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

import pytest
from rich.console import Console

from tests.studies.test_budget_pilot import finish_rate_pilots
from tests.studies.test_results import fake_run
from whale.core.config import ConfigError
from whale.core.files import atomic_write_json, read_json
from whale.core.provenance import code_version
from whale.studies.plan import EDITION, SIX, STUDIES, Study, load_summary, not_yet, summary_path
from whale.studies.running import commits_of, held_runs, refuse_mixed_commits, run_study, sharing

TINY = dict(preset="tiny", overrides=("domain.name=math",))


def write_summary(docs: Path, study: Study, runs, complete: bool, edition: int | None = EDITION) -> None:
    record = {"study": study.name, "methods": list(study.methods), "k": 8, "seeds": study.seeds}
    record |= {"complete": complete, "runs": [asdict(r) for r in runs]}
    if edition is not None:
        record["edition"] = edition
    atomic_write_json(summary_path(docs, study), record)


def held(method: str, seed: int, commit: str):
    run = fake_run(method, [(0, 0.1), (64, 0.2)])
    run.seed, run.commits = seed, [commit]
    return run


def test_a_study_whose_runs_ran_at_different_commits_is_refused_unless_allowed(tmp_path):
    one, other = fake_run("whale", [(0, 0.1)]), fake_run("weight-only", [(0, 0.1)])
    one.commits, other.commits = ["aaaaaaa"], ["aaaaaaa", "bbbbbbb"]  # the second was resumed at a new one
    assert commits_of([one, other]) == ["aaaaaaa", "bbbbbbb"]
    with pytest.raises(ConfigError, match="ran at different commits \\(aaaaaaa, bbbbbbb\\)"):
        refuse_mixed_commits("math", [one, other], tmp_path, allowed=False)
    refuse_mixed_commits("math", [one, other], tmp_path, allowed=True)
    other.commits = ["aaaaaaa"]
    refuse_mixed_commits("math", [one, other], tmp_path, allowed=False)
    assert commits_of([fake_run("x", [(0, 0.0)])]) == ["not recorded"]  # summaries from before issue 22


def test_runs_the_summary_holds_at_this_commit_are_not_run_again(tmp_path):
    study = Study("tiny-held", "t", methods=("whale", "weight-only"), seeds=2, **TINY)
    runs = [held(m, seed, code_version()) for seed in (0, 1) for m in study.methods]
    write_summary(tmp_path, study, runs, complete=False)
    console = Console(record=True, width=200)
    path = run_study(study, tmp_path / "runs", tmp_path, console)
    text = console.export_text()
    assert text.count("held by the summary, not run again") == 4 and "study tiny-held: run 4 of 4" in text
    assert not (tmp_path / "runs").exists()  # nothing ran
    record = read_json(path)
    assert record["complete"] and record["edition"] == EDITION
    assert [(r["method"], r["seed"]) for r in record["runs"]] == [
        ("whale", 0), ("whale", 1), ("weight-only", 0), ("weight-only", 1)
    ]  # fmt: skip


def test_runs_held_at_another_commit_are_refused_before_anything_runs(tmp_path):
    study = Study("tiny-stale", "t", methods=("whale",), seeds=1, **TINY)
    write_summary(tmp_path, study, [held("whale", 0, "0000000")], complete=False)
    with pytest.raises(ConfigError, match="holds runs at 0000000, this checkout is at"):
        run_study(study, tmp_path / "runs", tmp_path, Console(record=True))
    assert not (tmp_path / "runs").exists()


def test_only_this_editions_summaries_lend_runs_and_partial_ones_are_not_rendered(tmp_path):
    study = Study("tiny-old", "t", methods=("whale",), seeds=1, **TINY)
    write_summary(tmp_path, study, [held("whale", 0, code_version())], complete=True, edition=None)
    assert held_runs(tmp_path, study) == {}  # a first-edition summary: rendered, never reused
    assert load_summary(tmp_path, study) is not None
    write_summary(tmp_path, study, [held("whale", 0, code_version())], complete=False)
    assert set(held_runs(tmp_path, study)) == {("whale", 0)}
    assert load_summary(tmp_path, study) is None  # still being written: not in the document
    assert load_summary(tmp_path, study, partial=True) is not None


def test_studies_sharing_a_run_folder_and_config_lend_each_other_their_runs(tmp_path):
    rescue = next(s for s in STUDIES if s.name == "math-rescue-whale")
    names = {s.name for s in sharing(rescue, tmp_path, planning=True)}
    assert {"math", "math-algorithms", "math-phases-E2-I1", "math-gain"} <= names
    assert not names & {"math-phases-E6-I1", "math-minimal", "math-budget", "searchqa"}
    weight_only = {s.name for s in sharing(next(s for s in STUDIES if s.name == "math"), tmp_path, True)}
    assert not {n for n in weight_only if n.startswith("math-budget-")}  # a rate pilot's folder is its own


def test_a_summary_at_another_budget_than_its_pilot_now_gives_is_refused(tmp_path):
    math = next(s for s in STUDIES if s.name == "math")
    finish_rate_pilots(tmp_path)  # the math budget is 1536
    write_summary(tmp_path, math, [held("whale", 0, code_version())], complete=False)
    record = read_json(summary_path(tmp_path, math)) | {"budget_rollouts": 768}
    atomic_write_json(summary_path(tmp_path, math), record)
    with pytest.raises(ConfigError, match="holds runs at budget 768, the study now runs at 1536"):
        held_runs(tmp_path, math)
    atomic_write_json(summary_path(tmp_path, math), record | {"budget_rollouts": 1536})
    assert set(held_runs(tmp_path, math)) == {("whale", 0)}


@pytest.mark.slow
def test_a_study_continues_from_its_committed_summary_when_the_run_folders_are_gone(compared, tmp_path):
    out = tmp_path / "runs" / "cmp"  # a copy: the worker's other tests read the fixture's folders
    shutil.copytree(compared[0], out)  # the six methods on the tiny preset, one seed
    study = Study("math", "Math (tiny)", methods=SIX, seeds=1, folder=out.name, **TINY)
    docs = tmp_path / "docs"
    run_study(study, out.parent, docs, Console(record=True, width=200))
    summary = read_json(summary_path(docs, study))
    dropped = summary["runs"].pop()  # as if the sitting ended before the last run was summarized
    summary["complete"] = False
    atomic_write_json(summary_path(docs, study), summary)
    shutil.rmtree(out / SIX[0])  # another machine: the held runs' folders are gone
    console = Console(record=True, width=200)
    run_study(study, out.parent, docs, console)
    text = console.export_text()
    assert text.count("held by the summary, not run again") == 5
    assert text.count("finished run reused") == 1 and "fast-slow" in text
    assert not (out / SIX[0]).exists()
    again = read_json(summary_path(docs, study))
    assert again["complete"] and again["runs"][-1] == dropped


def test_a_study_in_progress_says_how_far_it_got_and_shows_no_figures(tmp_path):
    study = Study("tiny-progress", "t", methods=("whale", "weight-only"), seeds=2, **TINY)
    assert not_yet(tmp_path, study) == "Not run yet (`whale results --study tiny-progress`)."
    write_summary(tmp_path, study, [held("whale", 0, "aaaaaaa"), held("weight-only", 0, "aaaaaaa")], False)
    assert load_summary(tmp_path, study) is None
    assert not_yet(tmp_path, study).startswith("In progress: 2 of 4 runs have finished")
