"""What a run records it ran on: the checkout's commit, marked when tracked files under whale/ differ, and
the CPU with its SIMD flags."""

from __future__ import annotations

import os
import re

from whale.core import provenance


def test_the_code_version_is_this_checkouts_commit():
    assert re.fullmatch(r"[0-9a-f]{7}(\+dirty)?|whale \S+", provenance.code_version())


def test_a_version_is_added_only_when_it_differs_from_the_last(monkeypatch):
    monkeypatch.setattr(provenance, "code_version", lambda: "bbbbbbb")
    assert provenance.with_version(None) == ["bbbbbbb"]
    assert provenance.with_version(["aaaaaaa"]) == ["aaaaaaa", "bbbbbbb"]
    assert provenance.with_version(["aaaaaaa", "bbbbbbb"]) == ["aaaaaaa", "bbbbbbb"]


def test_the_machine_names_the_cpu_its_cores_and_only_the_simd_flags_that_decide_kernels():
    cpu, flags = provenance.cpu_model_and_flags()
    line = provenance.machine()
    assert line.startswith(f"{cpu}, {os.cpu_count()} cores")
    named = line.split(", ")[2].split() if line.count(", ") >= 2 else []
    assert named == [f for f in provenance.SIMD_FLAGS if f in flags]


def test_a_value_is_appended_only_when_it_differs_from_the_last():
    assert provenance.appended(None, "x") == ["x"]
    assert provenance.appended(["x", "y"], "x") == ["x", "y", "x"]
    assert provenance.appended(["x", "y"], "y") == ["x", "y"]
