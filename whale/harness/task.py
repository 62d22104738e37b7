"""What the runner knows of a task: its inputs (all a harness sees), its tools, and how it is scored.

The domain layer builds on these; they live here so that the harness layer needs nothing above it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Task:
    id: str
    inputs: dict[str, Any]
    gold: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)


class ToolError(Exception):
    """A tool refused a call (bad arguments, illegal input); the harness sees it as an exception."""


class Toolbox(Protocol):
    """Per-rollout tool state. `call` serves one tool call from the harness; `names` lists the tools."""

    names: tuple[str, ...]

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any: ...


class Verifier(Protocol):
    """The part of a domain the runner calls: a fresh toolbox per rollout, then the answer's reward."""

    def toolbox(self, task: Task) -> Toolbox: ...

    def verify(self, task: Task, answer: str | None, toolbox: Toolbox) -> float: ...
