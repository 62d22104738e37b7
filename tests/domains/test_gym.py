"""domain=reasoning-gym: every dataset reasoning-gym lists either builds a sound domain (disjoint splits,
no gold in the inputs, its gold answer scores 1.0, and an empty one or another item's does not) or is
refused with the measured reason. Nothing is silently wrong."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("reasoning_gym")

from whale.core.config import ConfigError, DomainConfig  # noqa: E402
from whale.domains.gym import UNSUPPORTED, ReasoningGymDomain, gym_datasets  # noqa: E402
from whale.domains.registry import build_domain  # noqa: E402
from whale.harness.validate import problems  # noqa: E402

TINY = {"train": 1, "search": 1, "val": 1, "test": 1}
SEVERAL_VALID = {"jugs", "n_queens", "sokoban"}


@pytest.mark.parametrize("name", gym_datasets())
def test_every_dataset_builds_a_sound_domain_or_is_refused_with_its_reason(name):
    if name in UNSUPPORTED:
        with pytest.raises(ValueError, match=f"is not supported: {re.escape(UNSUPPORTED[name])}"):
            ReasoningGymDomain(dataset=name, sizes=TINY)
        return
    domain = ReasoningGymDomain(seed=3, dataset=name, sizes=TINY)
    splits = domain.splits()
    questions = [t.inputs["question"] for tasks in splits.values() for t in tasks]
    assert len(questions) == 4 and len(set(questions)) == 4  # disjoint by question text
    for task in (t for tasks in splits.values() for t in tasks):
        assert set(task.inputs) == {"question"}  # the metadata (which may hold the answer) stays out
        assert task.gold["entry"]["question"] == task.inputs["question"]
        assert domain.verify(task, str(task.gold["answer"]), domain.toolbox(task)) == 1.0
        assert domain.verify(task, "", domain.toolbox(task)) < 1.0
    # A wrong answer scores below 1.0: another item's gold, where it differs from this one's. Not where
    # another item's answer can be a valid solution too (seen, and checked by hand: a pour sequence that
    # also reaches the target, a queens board that also fits, a push sequence that also solves).
    tasks = [t for ts in splits.values() for t in ts] if name not in SEVERAL_VALID else []
    for task in tasks:
        wrong = [str(t.gold["answer"]) for t in tasks if str(t.gold["answer"]) != str(task.gold["answer"])]
        if wrong:
            assert domain.verify(task, wrong[0], domain.toolbox(task)) < 1.0, (task.gold["answer"], wrong[0])


def test_splits_are_seeded_apart_and_exposed_metadata_is_named():
    domain = ReasoningGymDomain(
        seed=0, dataset="basic_arithmetic", sizes={"train": 40, "search": 10, "val": 10, "test": 20}
    )
    splits = domain.splits()
    questions = [t.inputs["question"] for tasks in splits.values() for t in tasks]
    assert len(questions) == len(set(questions)) == 80
    again = ReasoningGymDomain(
        seed=0, dataset="basic_arithmetic", sizes={"train": 5, "search": 10, "val": 10, "test": 20}
    )
    assert again.splits()["test"] == splits["test"]  # the train size never changes evaluation splits
    assert (
        ReasoningGymDomain(seed=1, dataset="basic_arithmetic", sizes=TINY).splits()["test"]
        != splits["test"][:1]
    )
    exposed = ReasoningGymDomain(dataset="basic_arithmetic", sizes=TINY, expose=["num_terms"]).splits()
    assert set(exposed["test"][0].inputs) == {"question", "num_terms"}
    with pytest.raises(ValueError, match="expose names \\['nope'\\]"):
        ReasoningGymDomain(dataset="basic_arithmetic", sizes=TINY, expose=["nope"]).splits()
    assert "Example question (train)" in domain.brief and "basic_arithmetic" in domain.brief
    assert problems(domain.seed_harness()) == []


def test_a_weighted_mix_and_config_mistakes():
    mix = [{"name": "basic_arithmetic", "weight": 1.0}, {"name": "spell_backward", "weight": 1.0}]
    domain = ReasoningGymDomain(datasets=mix, sizes={"train": 20, "search": 4, "val": 4, "test": 8})
    tasks = [t for ts in domain.splits().values() for t in ts]
    assert {t.meta["dataset"] for t in tasks} == {"basic_arithmetic", "spell_backward"}
    assert all(domain.verify(t, str(t.gold["answer"]), None) == 1.0 for t in tasks)
    for options, words in (
        ({"dataset": "no_such_set"}, "has no dataset 'no_such_set'"),
        ({"dataset": "boxnet"}, "not supported"),
        ({"dataset": "basic_arithmetic", "config": {"min_terms": "many"}}, "basic_arithmetic config"),
        ({"dataset": "basic_arithmetic", "config": {"no_such_setting": 1}}, "basic_arithmetic config"),
    ):
        with pytest.raises(ConfigError, match=words):
            build_domain(DomainConfig(name="reasoning-gym", sizes=TINY, options=options))
