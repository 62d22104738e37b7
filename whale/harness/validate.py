"""Static checks on harness source before anything runs it (first line of defence, not the only one)."""

from __future__ import annotations

import ast

from whale.harness.parsing import Unparsable, parse_untrusted

ALLOWED_IMPORTS = frozenset(
    {"re", "math", "json", "collections", "itertools", "functools", "statistics", "random", "string"}
)
FORBIDDEN_NAMES = frozenset(
    {
        "open", "exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr", "globals",
        "locals", "vars", "input", "breakpoint", "help", "memoryview", "type", "object", "super",
        "classmethod", "staticmethod", "property", "exit", "quit",
    }
)  # fmt: skip
# Introspection attributes that lead from any generator, coroutine, frame or traceback to the worker's
# own globals (and so to `os`); none starts with an underscore, so they are named one by one.
FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "cr_origin", "ag_frame",
        "ag_code", "ag_await", "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame",
        "tb_next", "co_code", "func_globals",
    }
)  # fmt: skip


class HarnessInvalid(ValueError):
    """The harness source breaks the contract; the message says where and why."""


def problems(source: str) -> list[str]:
    """Every contract violation found in harness `source`, as 'line N: reason' strings (empty when valid)."""
    found, tree = _scan(source)
    if tree is None:
        return found
    runs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"]
    if not runs:
        found.append("no top-level `def run(task, llm, tools)`")
    elif len(runs[0].args.args) != 3:
        found.append(f"line {runs[0].lineno}: run() must take exactly (task, llm, tools)")
    return found


def code_problems(source: str) -> list[str]:
    """The same rules for free-standing code (the math python tool), without the run() contract."""
    return _scan(source)[0]


def _scan(source: str) -> tuple[list[str], ast.Module | None]:
    try:
        tree = parse_untrusted(source)
    except Unparsable as exc:
        return [f"line {exc.lineno}: {exc.msg}" if exc.lineno else exc.msg], None
    except SyntaxError as exc:
        return [f"line {exc.lineno or 1}: syntax error: {exc.msg}"], None
    found: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_IMPORTS:
                    found.append(f"line {line}: import of {alias.name!r} is not allowed")
        elif isinstance(node, ast.ImportFrom):
            if node.level or node.module not in ALLOWED_IMPORTS:
                found.append(f"line {line}: import from {node.module!r} is not allowed")
            for alias in node.names:
                if alias.name.startswith("_") or alias.name == "*":
                    found.append(f"line {line}: import of {alias.name!r} is not allowed")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            found.append(f"line {line}: access to private attribute {node.attr!r}")
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            found.append(f"line {line}: access to introspection attribute {node.attr!r}")
        elif isinstance(node, ast.MatchClass):  # `case C(__class__=x)` reads the attribute too
            for attr in node.kwd_attrs:
                if attr.startswith("_") or attr in FORBIDDEN_ATTRIBUTES:
                    found.append(f"line {line}: access to attribute {attr!r} in a class pattern")
        elif isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or node.id.startswith("__")):
            found.append(f"line {line}: use of {node.id!r} is not allowed")
    return found, tree


def check(source: str) -> None:
    """Raise HarnessInvalid naming the first problems found."""
    found = problems(source)
    if found:
        raise HarnessInvalid("; ".join(found[:5]))
