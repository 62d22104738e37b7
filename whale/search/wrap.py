"""How a mechanism wraps a harness file: the file's `run` is renamed `run_v<k>` and a new `run` after it
calls the old one, so a mechanism needs to know nothing about the code it wraps."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from whale.harness.parsing import parse_untrusted
from whale.search.toolspec import ToolSpec

MAX_MODEL_CALLS = 16  # the runner's default cap on model calls per rollout (harness.calls.RunnerLimits)


@dataclass(frozen=True)
class Context:
    """What a mechanism may read: the inputs of one search task, the incumbent's model calls per rollout,
    demonstrations (user text, passing reply, search task id) from the archive, and the domain's tools."""

    inputs: dict[str, Any]
    calls_per_rollout: float = 1.0
    demos: list[dict[str, str]] = field(default_factory=list)
    tools: list[ToolSpec] = field(default_factory=list)


def wrapped_name(source: str) -> str:
    taken = {int(m) for m in re.findall(r"\bdef run_v(\d+)\(", source)}
    return f"run_v{max(taken, default=0) + 1}"


def rename_run(source: str, name: str) -> str:
    """The source with its top-level `def run(` renamed (the wrapper added after it calls the old one)."""
    tree = parse_untrusted(source)
    runs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"]
    if len(runs) != 1:
        raise ValueError("the harness has no single top-level run()")
    lines = source.splitlines(keepends=True)
    line = runs[0].lineno - 1
    lines[line] = lines[line].replace("def run(", f"def {name}(", 1)
    return "".join(lines).rstrip("\n") + "\n"
