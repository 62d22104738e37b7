"""The plan's smoke check: each distinct run once, rarest first, a failure in a line and the rest go on,
and a finished run is not run again at the same code version."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from whale.core.files import read_json
from whale.core.provenance import code_version
from whale.studies.plan import STUDIES, Study
from whale.studies.smoke import SCALE, distinct_runs, smoke

SMALL = ("schedule.budget_rollouts=16", "eval.every_rollouts=16", "eval.k=1", "rft.tasks_per_step=2")
SMALL += ("rft.k=2",)


def test_the_plans_distinct_runs_come_once_each_and_the_last_study_first(tmp_path):
    runs = distinct_runs(list(STUDIES), tmp_path)  # no pilot has finished here: the presets' scale
    keys = [(r.preset, r.method, tuple(sorted(r.overrides))) for r in runs]
    assert len(keys) == len(set(keys)) < sum(len(s.methods) for s in STUDIES)
    assert runs[0].study == STUDIES[-1].name and runs[0].method == STUDIES[-1].methods[0]
    for study in STUDIES:
        for method in study.methods:
            key = (study.preset, method, tuple(sorted(o for o in study.overrides if not o.startswith(SCALE))))
            assert key in keys, (study.name, method)


def test_a_broken_run_is_reported_in_a_line_and_the_others_run_once(tmp_path, capsys):
    studies = [
        Study("fine", "fine", "tiny", ("weight-only",), overrides=("domain.name=math",)),
        Study("broken", "broken", "tiny", ("weight-only",), overrides=("weights.rescue=sometimes",)),
    ]
    console = Console(width=200)
    first = smoke(studies, tmp_path / "docs", tmp_path / "smoke", console, SMALL)
    assert [(r.study, status.split(":")[0]) for r, status in first] == [("broken", "failed"), ("fine", "ok")]
    assert "weights.rescue" in first[0][1] and "\n" not in first[0][1]
    folder = tmp_path / "smoke" / code_version() / "fine-weight-only"
    assert read_json(folder / "state.json")["finished"]
    before = (folder / "events.jsonl").read_text()
    again = smoke(studies[:1], tmp_path / "docs", tmp_path / "smoke", console, SMALL)
    assert [status for _, status in again] == ["ok"] and (folder / "events.jsonl").read_text() == before
    out = capsys.readouterr().out
    assert "[1/2] broken weight-only: failed: " in out and "[2/2] fine weight-only: ok" in out
    assert not Path(tmp_path / "smoke" / code_version() / "broken-weight-only").exists()
