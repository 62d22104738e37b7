"""What a run ran on: the git commit of the checkout whale is imported from, so every number can name the
commit it came from, and the CPU with the flags that decide its kernels, so that wall times compare."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
from functools import cache
from pathlib import Path


def installed_version() -> str:
    try:
        return f"whale {importlib.metadata.version('whale')}"
    except importlib.metadata.PackageNotFoundError:
        return "whale (not installed)"


@cache
def code_version() -> str:
    """`<commit>` of the checkout, `<commit>+dirty` with uncommitted changes to tracked files, or
    `whale <version>` when whale is not imported from a git checkout (an installed wheel)."""
    root = Path(__file__).resolve().parents[2]  # not `import whale`: the facade imports what imports this
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=7", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if head.returncode != 0:
            return installed_version()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "whale"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return installed_version()
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


SIMD_FLAGS = (
    "avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8", "amx_tile", "fma",
)  # fmt: skip


def cpu_model_and_flags() -> tuple[str, set[str]]:
    """The first CPU's model name and flags from /proc/cpuinfo ("unknown" and none elsewhere)."""
    cpu, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and cpu == "unknown":
                cpu = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return cpu, flags


@cache
def machine() -> str:
    """One line: the CPU model, its core count and the SIMD flags among SIMD_FLAGS it has."""
    cpu, flags = cpu_model_and_flags()
    simd = " ".join(f for f in SIMD_FLAGS if f in flags)
    return f"{cpu}, {os.cpu_count()} cores" + (f", {simd}" if simd else "")


def appended(values: list[str] | None, current: str) -> list[str]:
    """`values` with `current` added when it differs from the last (a resume on another commit or CPU)."""
    values = list(values or [])
    return values if values and values[-1] == current else [*values, current]


def with_version(versions: list[str] | None) -> list[str]:
    """The code versions a run has run at, with this process's added when it differs from the last."""
    return appended(versions, code_version())
