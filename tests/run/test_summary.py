"""The run summary's split of the search-split score into weight and harness gains."""

from __future__ import annotations

import pytest

from whale.run.summary import search_gains


def reeval(harness, score):
    return {"event": "reeval", "harness": harness, "score": score, "spent": 32}


def search(incumbent, score, accepted):
    return {
        "event": "search_iteration",
        "incumbent": incumbent,
        "incumbent_score": score,
        "accepted": accepted,
    }


def test_gains_telescope_to_the_change_of_the_score_and_credit_each_side_its_own_moves():
    events = [
        reeval("c0000", 0.10),  # the seed scored at the first search
        search("c0000", 0.10, False),
        search("c0002", 0.25, True),  # a harness gain of 0.15 under the same weights
        {"event": "weight_step", "total": 64},
        reeval("c0002", 0.30),  # the same harness under new weights: a weight gain of 0.05
        reeval("c0001", 0.90),  # a population member that is not the agent's harness: not counted
        search("c0002", 0.30, False),
    ]
    gains = search_gains(events)
    assert gains["start"] == 0.10 and gains["end"] == 0.30
    assert gains["harness"] == pytest.approx(0.15) and gains["weights"] == pytest.approx(0.05)
    assert gains["weights"] + gains["harness"] == pytest.approx(gains["end"] - gains["start"])
    assert [a["candidate"] for a in gains["accepted"]] == ["c0002"]


def test_a_run_that_never_searched_has_no_split():
    gains = search_gains([{"event": "weight_step", "total": 64}])
    assert gains["start"] is None and gains["accepted"] == []
