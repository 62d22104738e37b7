"""Static harness validation: the seed passes, each way out of the sandbox is named with its line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import whale
from whale.harness import parsing
from whale.harness.validate import HarnessInvalid, check, problems

SEED = (Path(whale.__file__).parent / "domains" / "harnesses" / "math_seed.py").read_text()
RUN = "def run(task, llm, tools):\n    return '1'\n"


def test_math_seed_harness_is_valid():
    assert problems(SEED) == []
    check(SEED)  # does not raise


def test_allowed_imports_and_ordinary_code_are_valid():
    source = (
        "import re\nimport json, math\nfrom collections import Counter\n"
        "CONST = 3\n"
        "class Helper:\n    def twice(self, x):\n        return 2 * x\n"
        "def run(task, llm, tools):\n"
        "    text = llm.chat([{'role': 'user', 'content': task['question']}])\n"
        "    return str(Counter(re.findall(r'\\d', text)).most_common(1) or Helper().twice(CONST))\n"
    )
    assert problems(source) == []


@pytest.mark.parametrize(
    ("body", "line", "needle"),
    [
        ("import os", 2, "'os'"),
        ("import json, subprocess", 2, "'subprocess'"),
        ("from os import path", 2, "'os'"),
        ("from json import _default_encoder", 2, "_default_encoder"),
        ("from json import *", 2, "'*'"),
        ("from . import helper", 2, "import from"),
        ("x = __import__('os')", 2, "__import__"),
        ("f = open('/tmp/x', 'w')", 2, "open"),
        ("y = eval('1 + 1')", 2, "eval"),
        ("exec('x = 1')", 2, "exec"),
        ("g = getattr(str, 'join')", 2, "getattr"),
        ("c = ().__class__", 2, "__class__"),
        ("import random\nz = random._os", 3, "_os"),
        ("b = __builtins__", 2, "__builtins__"),
        ("t = type(1)", 2, "type"),
        ("g = globals()", 2, "globals"),
        ("s = compile('1', 'f', 'eval')", 2, "compile"),
    ],
)
def test_forbidden_constructs_are_reported_with_their_line(body, line, needle):
    source = "X = 1\n" + body + "\n" + RUN
    found = problems(source)
    assert found, f"accepted: {body!r}"
    assert any(p.startswith(f"line {line}:") and needle in p for p in found), found
    with pytest.raises(HarnessInvalid):
        check(source)


def test_forbidden_use_inside_run_names_the_right_line():
    source = (
        "import json\n\n\ndef run(task, llm, tools):\n    data = json.loads('{}')\n    return eval('1')\n"
    )
    assert problems(source) == ["line 6: use of 'eval' is not allowed"]


def test_missing_run_is_reported():
    found = problems("import json\n\ndef solve(task, llm, tools):\n    return '1'\n")
    assert found == ["no top-level `def run(task, llm, tools)`"]


def test_nested_or_class_run_does_not_count():
    nested = "def outer():\n    def run(task, llm, tools):\n        return '1'\n    return run\n"
    assert any("no top-level" in p for p in problems(nested))


@pytest.mark.parametrize(
    "signature", ["def run(task, llm):", "def run(task, llm, tools, extra):", "def run():"]
)
def test_wrong_run_signature_is_reported_with_its_line(signature):
    found = problems("import json\n\n" + signature + "\n    return '1'\n")
    assert len(found) == 1
    assert re.match(r"line 3: run\(\) must take exactly \(task, llm, tools\)", found[0])


def test_syntax_error_is_reported_with_its_line():
    found = problems("X = 1\n\ndef run(task, llm, tools)\n    return '1'\n")
    assert len(found) == 1
    assert found[0].startswith("line 3: syntax error")


def test_oversized_source_is_refused():
    source = RUN + "# " + "x" * parsing.MAX_SOURCE_BYTES + "\n"
    found = problems(source)
    assert len(found) == 1 and "limit" in found[0]


def test_every_problem_is_listed_and_check_names_them():
    source = "import os\nimport sys\n\ndef run(task, llm, tools):\n    return open('f').read()\n"
    found = problems(source)
    lines = sorted(int(re.match(r"line (\d+):", p).group(1)) for p in found)
    assert lines == [1, 2, 5]
    with pytest.raises(HarnessInvalid, match=r"line 1: .*'os'.*line 2: .*'sys'"):
        check(source)


@pytest.mark.parametrize("expr", ["g.gi_frame", "frame.f_back", "frame.f_globals", "t.tb_frame"])
def test_frame_and_traceback_introspection_is_rejected(expr):
    """Frames lead to the globals of the code that called the harness (the worker's `os`, `sys`, ...)."""
    source = (
        "def run(task, llm, tools):\n    g = (x for x in [1])\n    frame = t = c = g\n"
        + f"    return str({expr})\n"
    )
    found = problems(source)
    assert any(p.startswith("line 4:") for p in found), found


def test_null_byte_is_reported_with_a_line_number():
    found = problems("X = 1\n\ndef run(task, llm, tools):\n    return 'a\x00b'\n")
    assert len(found) == 1 and "null" in found[0]
    assert re.match(r"line \d+: ", found[0]), found
