"""The rescue and gain-driven schedule tables of the studies beyond the paper, from unit events."""

from __future__ import annotations

from typing import Any

from tests.studies.test_results import fake_run
from whale.search.race import NO_DECISION
from whale.studies.beyond import (
    choice_counts,
    phase_sequence,
    rescue_rows,
    rescue_totals,
    section_beyond,
    side_rollouts,
    wilson,
)
from whale.studies.plan import BEYOND, STUDIES, Study, StudySummary


def step(rescue: dict[str, Any] | None = None, tasks: int = 8) -> dict[str, Any]:
    return {"event": "weight_step", "total": 64, "harnesses": {"c0000": tasks}, "rescue": rescue}


def search(accepted: bool = False, challengers: int = 2) -> dict[str, Any]:
    candidates = {f"c{i:04d}": 0.25 for i in range(1, challengers + 1)}
    return {"event": "search_iteration", "accepted": accepted, "spent": 68, "candidates": candidates}


def switch(reason: str) -> dict[str, Any]:
    return {"event": "phase_switch", "reason": reason}


def rescue(zero: int, rescued: int, by: dict[str, int], skipped: dict[str, int] | None = None) -> dict:
    return {
        "mode": "distill",
        "zero_signal": zero,
        "tried": zero,
        "rescued": rescued,
        "by_harness": by,
        "rollouts": 4 * zero,
        "examples": rescued,
        "skipped": skipped or {},
    }


def summary(name: str, runs: dict[str, list[dict[str, Any]]]) -> StudySummary:
    data = {m: [fake_run(m, [(0, 0.1), (64, 0.2)], events)] for m, events in runs.items()}
    meta = {"k": 8, "methods": list(runs), "preset": "x", "overrides": [], "domain": "math", "seeds": 1}
    return StudySummary(Study(name, name, "x", tuple(runs)), meta, data)


def test_units_are_listed_in_order_with_runs_collapsed():
    events = [step(), step(), switch("fixed length"), {"event": "reeval", "spent": 32}, search(), step()]
    assert phase_sequence(events) == "W2 H1 W1"
    assert side_rollouts(events) == (192, 100)  # re-evaluations are the search's spending
    assert phase_sequence([]) == ""


def test_phase_switches_are_counted_by_what_decided_them():
    events = [
        switch("probe: harness not measured yet"),
        switch("gain (phase signals): weights drew +1.00e-04 per rollout against -2.00e-05"),
        switch("gain (phase signals): harness drew +3.00e-04 per rollout against +1.00e-05"),
        switch("explore: harness not run in 4 phases"),
    ]
    assert choice_counts(events) == "explore 1, gain (phase signals) 2, probe 1"
    assert choice_counts([step()]) == "-"


def test_rescue_records_are_summed_over_weight_steps_and_off_runs_say_so():
    events = [
        step(rescue(5, 1, {"c0009": 1}, {"not in reply": 2})),
        step(None),
        step(rescue(3, 2, {"c0009": 1, "c0010": 1}, {"not in reply": 1, "multi-call": 1})),
    ]
    events[2]["rescue"]["targets"] = {"answer in place": 2, "reply": 1}  # older records have none
    t = rescue_totals(events)
    assert t is not None
    assert (t["zero_signal"], t["tried"], t["rescued"], t["rollouts"], t["examples"]) == (8, 8, 3, 32, 3)
    assert t["harnesses"] == 2  # distinct harnesses, not rescues
    assert t["skipped"] == "multi-call 1, not in reply 3"
    assert t["targets"] == "answer in place 2, reply 1"
    assert rescue_totals([step(None), step(None)]) is None
    off = fake_run("weight-only", [(0, 0.0)], [step(None), step(None, tasks=7)])
    on = fake_run("weight-only+distill", [(0, 0.0)], events)
    rows = rescue_rows({"weight-only": [off], "weight-only+distill": [on]})
    assert rows[0][2:] == ["- of 15"] + ["-"] * 7
    assert rows[1][2:5] == ["8 of 24", "8", "3"]
    assert rows[1][-2:] == ["answer in place 2, reply 1", "multi-call 1, not in reply 3"]


def test_each_study_gets_its_own_table():
    gain = summary(
        "g", {"whale": [step(), search()], "whale-gain": [step(), switch("probe: h"), search(True)]}
    )
    text = "\n".join(section_beyond(gain))
    assert "| whale-gain | 0 | W1 H1 | 64 / 68 | 1 of 1 | probe 1 |" in text
    assert "Rescue (" not in text
    rescued = summary("r", {"whale": [step()], "whale+on_policy": [step(rescue(2, 1, {"c1": 1}))]})
    text = "\n".join(section_beyond(rescued))
    assert "Rescue (r)" in text and "Schedules (" not in text
    assert section_beyond(summary("plain", {"whale": [step()], "weight-only": [step()]})) == []


def test_the_beyond_studies_pair_each_rescue_mode_with_its_schedule_and_share_the_domain_runs():
    assert all(s in STUDIES for s in BEYOND)
    main = {s.name: s for s in STUDIES}
    for s in BEYOND:  # the plain schedule's runs are the domain study's: same folder, preset, overrides
        domain = main[s.name.split("-")[0]]
        assert (s.runs_folder, s.preset, s.overrides) == (domain.runs_folder, domain.preset, domain.overrides)
        assert s.methods[0] in domain.methods or s.methods == ("harness-resample",)
        assert s.seeds == domain.seeds == 5
    rescue_studies = [s for s in BEYOND if "-rescue-" in s.name]
    for s in rescue_studies:
        schedule = s.methods[0]
        assert s.methods == (schedule, f"{schedule}+on_policy", f"{schedule}+distill")
    domains = ("math", "searchqa", "chess")
    assert {s.name for s in BEYOND if s.methods == ("whale", "whale-gain")} == {f"{d}-gain" for d in domains}
    assert {s.name for s in rescue_studies} == {
        f"{d}-rescue-{m}" for d in domains for m in ("weight-only", "whale")
    }
    controls = {s.name: s.methods for s in BEYOND if s.name.endswith(("-resample", "-random"))}
    assert controls == {
        **{f"{d}-resample": ("harness-resample",) for d in domains},
        **{f"{d}-random": ("harness-only", "harness-random") for d in domains},
    }


def test_the_wilson_interval_stays_inside_zero_and_one_and_is_wide_at_few_trials():
    low, high = wilson(0, 10)
    assert low == 0.0 and 0.27 < high < 0.28  # the textbook 0 of 10: [0, 0.278]
    low, high = wilson(5, 10)
    assert 0.23 < low < 0.24 and 0.76 < high < 0.77
    assert wilson(0, 0) == (0.0, 1.0)
    assert wilson(3, 300)[1] < wilson(3, 30)[1]


def test_the_resample_control_counts_every_accepted_copy_as_a_false_acceptance():
    cut = search() | {"reason": f"{NO_DECISION}: the budget ran out before look 3, after 8 tasks"}
    control = summary(
        "searchqa-resample",
        {"harness-resample": [search(), search(True, 1), search(), search(), search(challengers=0), cut]},
    )  # the last two races were cut short by the budget, before and after scoring: neither decided
    text = "\n".join(section_beyond(control))
    assert "| harness-resample | 0 | 4 | 7 | 1 |" in text
    assert "1 of 4 iterations, 25.0%" in text
    assert "resample" in {s.name.split("-")[1] for s in BEYOND}
