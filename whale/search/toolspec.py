"""What a proposer may know of a domain's tools without reading its code: names, parameters, whether a
tool without parameters returns a list of options (legal moves, allowed labels) a reply can be snapped to,
and whether a one-parameter tool evaluates arithmetic."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from whale.harness.task import Toolbox
from whale.search.diagnosis import MAX_OPTIONS


@dataclass(frozen=True)
class ToolSpec:
    name: str
    params: tuple[str, ...] | None  # None: the toolbox does not say
    lists_options: bool = False  # takes no arguments and returns strings (or a dict of string lists)
    evaluates: bool = False  # takes one argument and returns 5 for "2 + 3"


def option_lists(value: Any) -> list[list[str]]:
    """The lists of 2 to MAX_OPTIONS strings in a tool's result: the result itself, or a dict's values."""
    values = list(value.values()) if isinstance(value, dict) else [value]
    return [
        v for v in values
        if isinstance(v, list) and 2 <= len(v) <= MAX_OPTIONS and all(isinstance(x, str) for x in v)
    ]  # fmt: skip


def brief_params(brief: str) -> dict[str, tuple[str, ...]]:
    """Required parameters per tool as the brief writes them: `tools.search(query, k=3)` -> ("query",)."""
    found = {}
    for name, inside in re.findall(r"tools\.(\w+)\(([^)]*)\)", brief):
        parts = [p.split(":")[0].strip() for p in inside.split(",") if p.strip()]
        found.setdefault(name, tuple(p for p in parts if "=" not in p and p.isidentifier()))
    return found


def tool_specs(toolbox: Toolbox, brief: str = "") -> list[ToolSpec]:
    """Each tool's required parameters, from the toolbox method of the same name or else from the brief. A
    tool without parameters is called once on this fresh toolbox (a new one serves every rollout) to see
    whether it lists options; a tool with one is called once with "2 + 3" to see whether it computes."""
    written = brief_params(brief)
    specs = []
    for name in toolbox.names:
        params = method_params(getattr(toolbox, name, None))
        params = written.get(name) if params is None else params
        lists = params == () and probe(toolbox, name, [], lambda found: bool(option_lists(found)))
        computes = params is not None and len(params) == 1 and probe(toolbox, name, ["2 + 3"], is_five)
        specs.append(ToolSpec(name, params, lists, computes))
    return specs


def is_five(found: Any) -> bool:
    return str(found).strip() in ("5", "5.0")


def probe(toolbox: Toolbox, name: str, args: list[Any], test: Callable[[Any], bool]) -> bool:
    try:
        return test(toolbox.call(name, args, {}))
    except Exception:
        return False


def method_params(method: Any) -> tuple[str, ...] | None:
    if not callable(method):
        return None
    try:
        sig = inspect.signature(method)
    except (TypeError, ValueError):
        return None
    required = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(
        p.name for p in sig.parameters.values() if p.kind in required and p.default is inspect.Parameter.empty
    )
