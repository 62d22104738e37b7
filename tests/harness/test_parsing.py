"""Parsing untrusted code in the parent: refusals with a reason, never RecursionError or MemoryError."""

from __future__ import annotations

import pytest

from whale.harness import parsing
from whale.harness.validate import problems
from whale.search.archive import code_fingerprint


@pytest.mark.parametrize(
    "expression, reason",
    [
        ("-" * 30_000 + "1", "too deeply nested to parse"),
        ("1" + " + 1" * 10_000, "too deeply nested to parse"),
        ("-" * 250 + "1", "line 2: nested deeper than 200 levels"),
        ("[" * 200_000, "over the 64000-byte limit"),
    ],
)
def test_sources_that_would_crash_the_parser_or_its_visitors_are_refused_with_a_reason(expression, reason):
    """In the parent: validation, the archive's fingerprint and the calculator tool all parse code that
    whale did not write; none may raise RecursionError or MemoryError (the run, and its resume, would)."""
    source = f"def run(task, llm, tools):\n    return {expression}\n"
    found = problems(source)
    assert len(found) == 1 and reason in found[0], found
    assert len(code_fingerprint(source)) == 16
    with pytest.raises(parsing.Unparsable):
        parsing.parse_untrusted(source)
