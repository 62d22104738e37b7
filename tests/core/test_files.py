import json
import os

import pytest

from whale.core.files import (
    append_jsonl,
    atomic_write_json,
    atomic_write_text,
    jsonl_line_count,
    read_json,
    read_jsonl,
    truncate_jsonl,
)


def test_atomic_write_creates_parents_and_leaves_no_temp(tmp_path):
    p = tmp_path / "a" / "b" / "state.json"
    atomic_write_json(p, {"z": 1, "a": tmp_path})
    atomic_write_json(p, {"z": 2, "a": [1, 2]})
    assert read_json(p) == {"z": 2, "a": [1, 2]}
    assert list(p.read_text().splitlines()[1:2]) == ['  "z": 2,']  # indent=2, insertion order
    atomic_write_text(tmp_path / "a" / "note.txt", "héllo")
    assert (tmp_path / "a" / "note.txt").read_text(encoding="utf-8") == "héllo"
    assert sorted(x.name for x in (tmp_path / "a" / "b").iterdir()) == ["state.json"]
    assert sorted(x.name for x in (tmp_path / "a").iterdir()) == ["b", "note.txt"]
    plain = tmp_path / "plain.txt"
    plain.write_text("x")  # an ordinary file's mode under this umask
    assert p.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777  # not mkstemp's 0600


def test_atomic_write_failure_keeps_old_file_and_no_temp(tmp_path, monkeypatch):
    p = tmp_path / "s.json"
    atomic_write_json(p, {"ok": True})

    def crash(*args: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write_json(p, {"ok": False})
    monkeypatch.undo()
    assert read_json(p) == {"ok": True}
    assert [x.name for x in tmp_path.iterdir()] == ["s.json"]


def test_append_and_read_roundtrip(tmp_path):
    p = tmp_path / "log" / "r.jsonl"
    assert read_jsonl(p) == [] and jsonl_line_count(p) == 0
    append_jsonl(p, [{"i": 0}, {"i": 1}])
    append_jsonl(p, [{"i": 2, "path": tmp_path}])
    recs = read_jsonl(p)
    assert [r["i"] for r in recs] == [0, 1, 2] and recs[2]["path"] == str(tmp_path)
    assert p.read_text().count("\n") == 3


def test_read_jsonl_drops_truncated_last_line(tmp_path):
    p = tmp_path / "r.jsonl"
    append_jsonl(p, [{"i": 0}, {"i": 1}])
    with open(p, "a") as f:
        f.write('{"i": 2, "tex')
    assert read_jsonl(p) == [{"i": 0}, {"i": 1}]
    assert jsonl_line_count(p) == 2


def test_read_jsonl_raises_naming_corrupt_middle_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"i": 0}\n{"i": 1\n{"i": 2}\n')
    with pytest.raises(ValueError, match=r"r\.jsonl:2: corrupt record"):
        read_jsonl(p)


def test_append_after_torn_line_does_not_corrupt_log(tmp_path):
    p = tmp_path / "r.jsonl"
    append_jsonl(p, [{"i": 0}])
    with open(p, "a") as f:
        f.write('{"i": 1, "x":')
    append_jsonl(p, [{"i": 2}])
    assert read_jsonl(p) == [{"i": 0}, {"i": 2}]
    with open(p, "a") as f:
        f.write('{"i": 3}')  # complete record, newline lost
    append_jsonl(p, [{"i": 4}])
    assert [r["i"] for r in read_jsonl(p)] == [0, 2, 3, 4]


def test_truncate_jsonl_keeps_exactly_n_lines(tmp_path):
    p = tmp_path / "r.jsonl"
    append_jsonl(p, [{"i": i} for i in range(5)])
    with open(p, "a") as f:
        f.write('{"broken')
    truncate_jsonl(p, 3)
    assert read_jsonl(p) == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert p.read_text() == "".join(json.dumps({"i": i}) + "\n" for i in range(3))
    assert [x.name for x in tmp_path.iterdir()] == ["r.jsonl"]
    truncate_jsonl(p, 0)
    assert p.read_text() == "" and jsonl_line_count(p) == 0
    with pytest.raises(ValueError):
        truncate_jsonl(p, 1)
