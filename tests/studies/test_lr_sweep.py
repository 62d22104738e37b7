"""The learning-rate sweep: the rate is picked on validation, and its section renders from the rate pilots'
summaries."""

from __future__ import annotations

from tests.studies.test_budget_pilot import finish_rate_pilots
from whale.studies.budget_pilot import section_lr_sweep
from whale.studies.compare import RunData
from whale.studies.lr_sweep import collapse, pick_rate

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


def test_the_section_shows_each_rate_pilot_whole_beside_the_pick(tmp_path):
    docs = tmp_path / "docs"
    (docs / "results").mkdir(parents=True)
    assert "Not run yet: it is the rate pilots" in "\n".join(section_lr_sweep(docs))
    finish_rate_pilots(docs)  # 1e-4 still rising, 3e-4 settling (the pick), 1e-3 collapsing
    text = "\n".join(section_lr_sweep(docs))
    assert "The pick, **3e-4**" in text and "to 2304 budget rollouts" in text
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line[:4] in ("| 1e", "| 3e")}
    assert set(rows) == {"| 1e-4", "| 3e-4", "| 1e-3"}
    assert "the pick" in rows["| 3e-4"]
    assert "-6.0 pts" in rows["| 1e-3"] and rows["| 1e-3"].endswith("| 0.200 |")  # 0.20 at 384 vs 0.26; drop
    assert (docs / "results" / "math-lr.png").is_file()
