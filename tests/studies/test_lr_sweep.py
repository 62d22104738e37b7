"""The learning-rate sweep: the rate is picked on validation, and the section renders from summaries."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from whale.core.files import atomic_write_json
from whale.studies.compare import RunData
from whale.studies.lr_sweep import collapse, pick_rate, section_lr_sweep
from whale.studies.plan import STUDIES, summary_path

TASKS = [f"t{i}" for i in range(6)]


def run(seed: int, val: list[float], test: list[float]) -> RunData:
    points = [
        {
            "point": i,
            "rollouts": 192 * i,
            "val": {"mean": v},
            "test": {"mean": t},
            "tasks": {"val": dict.fromkeys(TASKS, v), "test": dict.fromkeys(TASKS, t)},
        }
        for i, (v, t) in enumerate(zip(val, test, strict=True))
    ]
    return RunData("weight-only", seed, points, {"wall_s": 1.0}, [])


def write(docs: Path, lr: str, runs: list[RunData]) -> None:
    study = next(s for s in STUDIES if s.name == f"math-lr-{lr}")
    meta = {"k": 8, "methods": ["weight-only"], "seeds": len(runs), "runs": [asdict(r) for r in runs]}
    atomic_write_json(summary_path(docs, study), meta)


def test_the_rate_is_picked_on_validation_even_where_test_disagrees():
    swept = {
        "1e-4": [run(0, [0.1, 0.2], [0.1, 0.5])],  # best on test
        "3e-4": [run(0, [0.1, 0.4], [0.1, 0.2])],  # best on validation
    }
    assert pick_rate(swept) == "3e-4"


def test_a_tie_on_validation_goes_to_the_smaller_rate():
    swept = {"1e-3": [run(0, [0.1, 0.3], [0.1, 0.1])], "1e-4": [run(0, [0.3, 0.1], [0.1, 0.1])]}
    assert pick_rate(swept) == "1e-4"


def test_collapse_is_the_fall_from_the_test_peak_to_the_last_point():
    assert collapse(run(0, [0, 0, 0], [0.05, 0.11, 0.02])) == 0.11 - 0.02
    assert collapse(run(0, [0, 0], [0.05, 0.11])) == 0.0


def test_the_section_names_the_pick_and_the_rates_not_run(tmp_path):
    docs = tmp_path / "docs"
    (docs / "results").mkdir(parents=True)
    write(docs, "3e-4", [run(s, [0.1, 0.3, 0.3], [0.1, 0.2, 0.2]) for s in (0, 1)])
    write(docs, "1e-3", [run(s, [0.1, 0.2, 0.0], [0.1, 0.3, 0.0]) for s in (0, 1)])
    text = "\n".join(section_lr_sweep(docs))
    assert "Picked: **3e-4**" in text
    assert "Not run yet: 1e-4." in text
    row = next(line for line in text.splitlines() if line.startswith("| 1e-3 |"))
    assert "+10.0 pts" in row and row.endswith("| 0.300 |")  # vs the pick at val-selected points; collapse
    assert (docs / "results" / "math-lr.png").is_file()


def test_before_any_rate_ran_the_section_says_so(tmp_path):
    assert "Not run yet (`make results` runs it)." in section_lr_sweep(tmp_path)
