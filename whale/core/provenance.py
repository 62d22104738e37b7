"""The code a run ran: the git commit of the checkout whale is imported from, so every number can name
the commit it came from."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

import whale


@cache
def code_version() -> str:
    """`<commit>` of the checkout, `<commit>+dirty` with uncommitted changes to tracked files, or
    `whale <version>` when whale is not imported from a git checkout (an installed wheel)."""
    root = Path(whale.__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=7", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if head.returncode != 0:
            return f"whale {whale.__version__}"
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "whale"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return f"whale {whale.__version__}"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def with_version(versions: list[str] | None) -> list[str]:
    """The code versions a run has run at, with this process's added when it differs from the last."""
    versions = list(versions or [])
    return versions if versions and versions[-1] == code_version() else [*versions, code_version()]
