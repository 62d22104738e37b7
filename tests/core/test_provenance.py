"""The code version a run records: the checkout's commit, marked when tracked files under whale/ differ."""

from __future__ import annotations

import re

from whale.core import provenance


def test_the_code_version_is_this_checkouts_commit():
    assert re.fullmatch(r"[0-9a-f]{7}(\+dirty)?|whale \S+", provenance.code_version())


def test_a_version_is_added_only_when_it_differs_from_the_last(monkeypatch):
    monkeypatch.setattr(provenance, "code_version", lambda: "bbbbbbb")
    assert provenance.with_version(None) == ["bbbbbbb"]
    assert provenance.with_version(["aaaaaaa"]) == ["aaaaaaa", "bbbbbbb"]
    assert provenance.with_version(["aaaaaaa", "bbbbbbb"]) == ["aaaaaaa", "bbbbbbb"]
