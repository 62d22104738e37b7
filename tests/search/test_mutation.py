"""Offline mutation proposer: knob discovery, literal rewriting, mutation and crossover of harnesses."""

from __future__ import annotations

import ast
import itertools
import random

import pytest

from whale.domains.math import MathDomain
from whale.harness import validate
from whale.harness.records import HarnessCandidate
from whale.search.mutation import (
    MutationProposer,
    find_knobs,
    live_knobs,
    mutate_value,
    set_knobs,
    signature,
)

DOMAIN = MathDomain(seed=0, sizes={"train": 1, "search": 1, "val": 1, "test": 1})
SEED = DOMAIN.seed_harness()
POOL = DOMAIN.knob_pool()


def ids(start: int = 1):
    counter = itertools.count(start)
    return lambda: f"c{next(counter):04d}"


class _BlankKnobs(ast.NodeTransformer):
    """Replace the value of every module-level UPPER_CASE literal assignment with None."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        for stmt in node.body:
            if (
                isinstance(stmt, ast.Assign)
                and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id.isupper()
                and isinstance(stmt.value, ast.Constant)
            ):
                stmt.value = ast.Constant(None)
        return node


def skeleton(source: str) -> str:
    return ast.dump(_BlankKnobs().visit(ast.parse(source)))


def test_find_knobs_on_the_math_seed():
    knobs = find_knobs(SEED)
    assert {"SYSTEM_PROMPT", "USE_CALCULATOR", "FEW_SHOT", "N_VOTES", "RETRIES", "MAX_TOKENS"} <= set(knobs)
    assert knobs["USE_CALCULATOR"].value is False and knobs["MAX_TOKENS"].value == 48
    for site in knobs.values():
        assert ast.literal_eval(SEED[site.start : site.end]) == site.value
    # only module-level UPPER_CASE names bound to plain literals
    source = "A = 1\nb = 2\nC = [1]\nD = -1\nE = None\ndef f():\n    F = 3\nG = H = 4\nI: int = 5\nJ = 'x'\n"
    assert set(find_knobs(source)) == {"A", "J"}


def test_propose_gives_n_valid_distinct_knob_only_candidates():
    seed = HarnessCandidate("c0000", SEED)
    seen = {signature(SEED)}
    proposer = MutationProposer(POOL, seed=0)
    out = proposer.mutants([seed], set(seen), 8, ids())
    assert [c.id for c in out] == [f"c{i:04d}" for i in range(1, 9)]
    sigs = [signature(c.source) for c in out]
    assert len(set(sigs)) == 8 and not set(sigs) & seen
    base_knobs = find_knobs(SEED)
    for c in out:
        assert validate.problems(c.source) == []
        assert c.parent == "c0000" and c.proposer == "mutation" and c.hypothesis.startswith("mutate ")
        assert skeleton(c.source) == skeleton(SEED)
        knobs = find_knobs(c.source)
        assert set(knobs) == set(base_knobs)
        changed = {n for n in knobs if knobs[n].value != base_knobs[n].value}
        assert 1 <= len(changed) <= 2
        for name in changed:
            assert name in c.hypothesis
            old, new = base_knobs[name].value, knobs[name].value
            assert type(new) is type(old)
            if isinstance(old, str):
                assert new in POOL[name]
        # byte-for-byte outside the changed literals
        changed_lines = [
            (a, b) for a, b in zip(SEED.splitlines(), c.source.splitlines(), strict=True) if a != b
        ]
        assert {a.split(" = ")[0] for a, _ in changed_lines} == changed


def test_live_knobs_follow_the_bool_knobs_that_guard_them():
    dead = {"CALC_INSTRUCTION", "EXAMPLE_QUESTION", "EXAMPLE_ANSWER", "EXAMPLE_EXPRESSION"}
    assert set(find_knobs(SEED)) - live_knobs(SEED) == dead  # few-shot and calculator both off
    few_shot = set_knobs(SEED, {"FEW_SHOT": True})
    assert set(find_knobs(few_shot)) - live_knobs(few_shot) == {"CALC_INSTRUCTION", "EXAMPLE_EXPRESSION"}
    both = set_knobs(SEED, {"FEW_SHOT": True, "USE_CALCULATOR": True})
    assert set(find_knobs(both)) - live_knobs(both) == {"INSTRUCTION", "EXAMPLE_ANSWER"}
    source = (
        "A = False\nB = 1\nC = 2\ndef run(task, llm, tools):\n    if not A:\n        return B\n    return C\n"
    )
    assert live_knobs(source) == {"A", "B", "C"}  # conservative: C after the early return still counts
    assert live_knobs(source.replace("if not A", "if A")) == {"A", "C"}


def test_mutation_seldom_edits_a_knob_the_harness_does_not_read():
    seed = HarnessCandidate("c0000", SEED)
    dead = set(find_knobs(SEED)) - live_knobs(SEED)
    out = MutationProposer(POOL, seed=0).mutants([seed], {signature(SEED)}, 30, ids())
    base = find_knobs(SEED)
    touched = [{n for n, k in find_knobs(c.source).items() if k.value != base[n].value} for c in out]
    assert len(out) == 30 and sum(bool(t & dead) for t in touched) <= 3


def test_propose_is_seeded():
    seed = HarnessCandidate("c0000", SEED)
    a = MutationProposer(POOL, seed=4).mutants([seed], {signature(SEED)}, 5, ids())
    b = MutationProposer(POOL, seed=4).mutants([seed], {signature(SEED)}, 5, ids())
    c = MutationProposer(POOL, seed=5).mutants([seed], {signature(SEED)}, 5, ids())
    assert [x.source for x in a] == [x.source for x in b]
    assert [x.source for x in a] != [x.source for x in c]


def test_propose_stops_when_the_space_is_exhausted():
    source = "FLAG = True\n\ndef run(task, llm, tools):\n    return str(FLAG)\n"
    parent = HarnessCandidate("c0000", source)
    proposer = MutationProposer({}, seed=0)
    (only,) = proposer.mutants([parent], {signature(source)}, 3, ids())
    assert find_knobs(only.source)["FLAG"].value is False
    both = {signature(source), signature(only.source)}
    assert proposer.mutants([parent], both, 3, ids()) == []
    no_knobs = HarnessCandidate("c0000", "def run(task, llm, tools):\n    return '1'\n")
    assert proposer.mutants([no_knobs], set(), 2, ids()) == []


def test_set_knobs_round_trip_and_awkward_literals():
    knobs = find_knobs(SEED)
    values = {"SYSTEM_PROMPT": "It's a \"quoted\"\nmulti-line — ünïcode ✓ prompt", "N_VOTES": 5,
              "FEW_SHOT": True, "MAX_TOKENS": 7}  # fmt: skip
    edited = set_knobs(SEED, values)
    assert validate.problems(edited) == []
    got = find_knobs(edited)
    assert {n: got[n].value for n in values} == values
    assert {n: s.value for n, s in got.items() if n not in values} == {
        n: s.value for n, s in knobs.items() if n not in values
    }
    restored = set_knobs(edited, {n: knobs[n].value for n in values})
    assert {n: s.value for n, s in find_knobs(restored).items()} == {n: s.value for n, s in knobs.items()}
    assert skeleton(restored) == skeleton(SEED)
    numbers = {"N_VOTES": 2, "FEW_SHOT": True}
    assert set_knobs(set_knobs(SEED, numbers), {n: knobs[n].value for n in numbers}) == SEED  # byte-exact
    # byte offsets vs character offsets: a non-ASCII literal earlier on the same line
    line = "A = 'é✓'; B = 1\nC = 'ü'  # ✓\n"
    assert set_knobs(line, {"B": 22}) == "A = 'é✓'; B = 22\nC = 'ü'  # ✓\n"
    assert set_knobs(line, {"A": "x", "C": "y"}) == "A = 'x'; B = 1\nC = 'y'  # ✓\n"
    with pytest.raises(KeyError, match="NOT_A_KNOB"):
        set_knobs(SEED, {"NOT_A_KNOB": 1})


def test_mutate_value_rules():
    rng = random.Random(0)
    assert mutate_value(True, [], rng) is False and mutate_value(False, [], rng) is True
    assert {mutate_value(0, [], rng) for _ in range(20)} == {1}
    assert {mutate_value(1, [], rng) for _ in range(20)} == {2}
    assert {mutate_value(48, [], rng) for _ in range(200)} == {24, 72, 96}  # sizes move by factors
    assert {mutate_value(3, [], rng) for _ in range(200)} == {2, 4, 6}
    assert {mutate_value("a", ["a", "b", "c"], rng) for _ in range(50)} == {"b", "c"}
    assert mutate_value("a", ["a"], rng) == "a"
    assert {mutate_value(0.5, [], rng) for _ in range(200)} == {0.25, 0.375, 0.625, 0.75}


def test_crossover_takes_each_knob_from_one_of_the_parents():
    a_values = {"SYSTEM_PROMPT": POOL["SYSTEM_PROMPT"][1], "FEW_SHOT": True, "N_VOTES": 3, "MAX_TOKENS": 32}
    b_values = {"SYSTEM_PROMPT": POOL["SYSTEM_PROMPT"][2], "FEW_SHOT": False, "N_VOTES": 5, "MAX_TOKENS": 64}
    a = HarnessCandidate("c0001", set_knobs(SEED, a_values))
    b = HarnessCandidate("c0002", set_knobs(SEED, b_values))
    proposer = MutationProposer(POOL, seed=1, crossover_rate=1.0)
    out = proposer.mutants([a, b], {signature(a.source), signature(b.source)}, 6, ids(3))
    assert len(out) == 6
    mixed = 0
    for c in out:
        assert c.hypothesis in ("crossover of c0001 and c0002", "crossover of c0002 and c0001")
        assert c.parent in ("c0001", "c0002")
        knobs = find_knobs(c.source)
        from_a = {n for n in a_values if knobs[n].value == a_values[n]}
        from_b = {n for n in b_values if knobs[n].value == b_values[n]}
        assert from_a | from_b == set(a_values) and not from_a & from_b
        assert all(knobs[n].value == s.value for n, s in find_knobs(SEED).items() if n not in a_values)
        mixed += bool(from_a and from_b)
        assert skeleton(c.source) == skeleton(SEED)
    assert mixed == 6  # pure copies of a parent are in `seen`, so every candidate mixes both


def test_text_only_proposals_change_prompt_strings_only():
    seed = HarnessCandidate("c0000", SEED)
    other = HarnessCandidate("c0009", set_knobs(SEED, {n: v[-1] for n, v in POOL.items() if len(v) > 1}))
    out = MutationProposer(POOL, seed=1, text_only=True, crossover_rate=0.5).mutants(
        [seed, other], {signature(SEED)}, 12, ids()
    )
    assert len(out) == 12
    base = find_knobs(SEED)
    for c in out:
        knobs = find_knobs(c.source)
        changed = {n for n in knobs if knobs[n].value != base[n].value}
        assert changed and all(isinstance(base[n].value, str) for n in changed), c.hypothesis
    mixed = MutationProposer(POOL, seed=1).mutants([seed], {signature(SEED)}, 12, ids())
    assert any(not isinstance(base[n].value, str) for c in mixed for n, s in find_knobs(c.source).items()
               if s.value != base[n].value)  # fmt: skip
