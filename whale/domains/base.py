"""The domain seam: what a task family gives whale (splits, tools, verifier, seed harness, proposer pool).

A domain author imports everything from here (Task, ToolError and Toolbox are defined with the runner, in
whale.harness.task). A domain runs in the parent process. Harness code in sandbox workers only ever sees
`Task.inputs`; gold answers stay in `Task.gold` and are read by `verify` in the parent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from whale.harness.task import Task, Toolbox, ToolError

__all__ = [
    "SPLITS",
    "Domain",
    "NoTools",
    "Task",
    "ToolError",
    "Toolbox",
    "read_jsonl_rows",
    "read_user_text",
    "utf8_error",
]

SPLITS = ("train", "search", "val", "test")


class NoTools:
    """The toolbox of a domain whose tasks have none (reasoning-gym, qa)."""

    names: tuple[str, ...] = ()

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        raise ToolError(f"unknown tool {name!r}: these tasks have no tools")


class Domain(Protocol):
    name: str
    brief: str  # what a proposer reads: the task, the tools, the rules

    def splits(self) -> dict[str, list[Task]]: ...

    def seed_harness(self) -> str: ...

    def toolbox(self, task: Task) -> Toolbox: ...

    def verify(self, task: Task, answer: str | None, toolbox: Toolbox) -> float: ...

    def knob_pool(self) -> dict[str, list[Any]]:
        """Values the offline mutation proposer may give to named UPPER_CASE harness constants."""
        ...


def utf8_error(path: str | Path) -> ValueError:
    """`path:line: not UTF-8 text`, for a decoding error met while reading a user's file. The line is
    found by decoding the file line by line (a line break never falls inside a UTF-8 sequence)."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return ValueError(f"{path}:{lineno}: not UTF-8 text (byte {e.start} of the line)")
    return ValueError(f"{path}: not UTF-8 text")


def read_user_text(path: str | Path) -> str:
    """A user's data file as text (UTF-8, a leading byte-order mark dropped); a file that is not UTF-8
    fails with `path:line: not UTF-8 text`."""
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise utf8_error(path) from None


def read_jsonl_rows(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line of a user's JSONL file; errors name path:line.

    Lines end at "\n" only: JSON strings may hold U+2028 and other characters that str.splitlines()
    would also split on."""
    rows = []
    for lineno, line in enumerate(read_user_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
        except RecursionError:
            raise ValueError(f"{path}:{lineno}: invalid JSON (nested too deeply)") from None
        except ValueError as e:  # an integer past Python's 4300-digit conversion limit
            raise ValueError(f"{path}:{lineno}: invalid JSON ({str(e).split(';')[0][:120]})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        rows.append((lineno, row))
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows
