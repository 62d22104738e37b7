"""The mechanisms table: program-proposer challengers counted by mechanism, before and after a weight step,
with controls, other proposers and shared runs left out."""

from __future__ import annotations

from tests.studies.test_results import fake_run
from whale.studies.accepted_mechanisms import domain_runs, mechanism_of, mechanism_tallies, section_mechanisms
from whale.studies.plan import Study, StudySummary


def iteration(incumbent: str, score: float, accepted: bool, candidates: dict, hypotheses: dict) -> dict:
    reason = f"{incumbent} accepted" if accepted else "no challenger passed after 64 tasks, 256 rollouts"
    return {
        "event": "search_iteration", "incumbent": incumbent, "incumbent_score": score, "accepted": accepted,
        "candidates": candidates, "hypotheses": hypotheses, "reason": reason,
    }  # fmt: skip


EVENTS = [
    {"event": "reeval", "harness": "c0000", "score": 0.10},
    iteration(
        "c0001", 0.30, True, {"c0001": 0.30, "c0002": 0.05}, {"c0001": "operands:calc x", "c0002": "demos y"}
    ),
    {"event": "weight_step", "step": 1},
    {"event": "reeval", "harness": "c0001", "score": 0.40},
    iteration("c0001", 0.40, False, {"c0003": 0.45}, {"c0003": "demos z"}),
    iteration("c0004", 0.50, True, {"c0004": 0.50, "c0005": 0.2}, {"c0004": "demos w", "c0005": "knob x"}),
    iteration("c0004", 0.50, False, {}, {"c0006": "votes"}),  # cut by the budget: nothing decided
]  # fmt: skip


def test_challengers_are_counted_by_mechanism_before_and_after_the_first_weight_step():
    assert mechanism_of("operands:calculator, the model names the operation") == "operands"
    tallies = mechanism_tallies([fake_run("whale", [(0, 0.1)], EVENTS)])
    assert set(tallies) == {"operands", "demos"}  # "knob" is not a mechanism; the cut race decided nothing
    assert (tallies["operands"].before.accepted, tallies["operands"].before.tried) == (1, 1)
    assert tallies["operands"].before.gains == [0.30 - 0.10]
    demos = tallies["demos"]
    assert (demos.before.accepted, demos.before.tried, demos.after.accepted, demos.after.tried) == (
        0,
        1,
        1,
        2,
    )
    assert demos.before.gains == [0.05 - 0.10]  # against the incumbent before its iteration
    assert [round(g, 3) for g in demos.after.gains] == [
        0.05,
        0.10,
    ]  # against the re-evaluation under new weights


def test_controls_ablations_and_shared_runs_are_left_out():
    run = fake_run("whale", [(0, 0.1)], EVENTS)
    control = fake_run("harness-resample", [(0, 0.1)], EVENTS)
    meta = {"domain": "math", "k": 8}
    math = StudySummary(Study("math", "m", "results-math", ("whale",), folder=""), meta, {"whale": [run]})
    sharer = StudySummary(
        Study("math-gain", "g", "results-math", ("whale",), folder="math"), meta, {"whale": [run]}
    )
    resample = StudySummary(
        Study("r", "r", "results-math", ("harness-resample",), folder="math"),
        meta,
        {"harness-resample": [control]},
    )
    mutation = StudySummary(
        Study("mu", "m", "results-math", ("whale",), overrides=("proposer.kind=mutation",)),
        meta,
        {"whale": [run]},
    )
    gym = StudySummary(
        Study("g", "g", "results-gym", ("whale",), overrides=("domain.options.dataset=knights_knaves",)),
        {"domain": "gym", "k": 8},
        {"whale": [run]},
    )
    assert {d: len(r) for d, r in domain_runs([math, sharer, resample, mutation, gym]).items()} == {
        "math": 1,
        "gym knights_knaves": 1,
    }
    text = "\n".join(section_mechanisms([math]))
    assert "| math | demos | 0/1, gain -0.050 | 1/2, gain +0.075 |" in text
    assert section_mechanisms([resample]) == []
