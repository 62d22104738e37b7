"""domain=qa on a user's own files: every format, a malformed row skipped by name (or refused under
strict), short splits, and each verifier."""

from __future__ import annotations

import json

import pytest

from whale.core.config import ConfigError, DomainConfig
from whale.domains.qa import QADomain, choice_index
from whale.domains.registry import build_domain
from whale.harness.validate import problems

ROWS = [{"question": f"What is {i} plus {i}?", "answer": str(2 * i)} for i in range(12)]
SIZES = {"train": 6, "search": 2, "val": 2, "test": 2}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_table(path, rows):
    pa = pytest.importorskip("pyarrow")
    table = pa.Table.from_pylist(rows)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
        return path
    path.mkdir()  # a datasets.save_to_disk folder: Arrow stream files named by state.json
    with pa.OSFile(str(path / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    (path / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    return path


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet", "folder"])
def test_every_format_loads_the_same_tasks(tmp_path, kind):
    if kind == "jsonl":
        path = write_jsonl(tmp_path / "qa.jsonl", ROWS)
    elif kind == "csv":
        path = tmp_path / "qa.csv"
        path.write_text("question,answer\n" + "".join(f'"{r["question"]}",{r["answer"]}\n' for r in ROWS))
    else:
        path = write_table(tmp_path / ("qa.parquet" if kind == "parquet" else "qa-dataset"), ROWS)
    domain = QADomain(path=str(path), sizes=SIZES, verifier="numeric")
    splits = domain.splits()
    questions = [t.inputs["question"] for tasks in splits.values() for t in tasks]
    assert len(questions) == len(set(questions)) == 12
    task = splits["test"][0]
    assert (
        set(task.inputs) == {"question"}
        and domain.verify(task, f"It is {task.gold['answers'][0]}.", None) == 1.0
    )
    assert problems(domain.seed_harness()) == []


def test_a_malformed_row_is_skipped_by_name_or_refused_under_strict(tmp_path, capsys):
    path = tmp_path / "qa.jsonl"
    lines = [json.dumps(r) for r in ROWS] + ["{not json", json.dumps({"question": "no answer here"})]
    path.write_text("\n".join(lines) + "\n")
    QADomain(path=str(path), sizes=SIZES).splits()
    err = capsys.readouterr().err
    assert f"whale: {path} (jsonl): rows loaded 12, skipped 2 (invalid JSON 1, no answer 1)" in err
    assert f"  skipped {path}:13: invalid JSON" in err and f"  skipped {path}:14: no answer" in err
    assert "qa splits used: train 6, search 2, val 2, test 2" in err
    with pytest.raises(ConfigError, match=rf"{path}:13: invalid JSON.*strict"):
        build_domain(DomainConfig(name="qa", sizes=SIZES, options={"path": str(path), "strict": True}))
    with pytest.raises(ConfigError, match="train gets 6 of the 60 rows asked for"):
        build_domain(DomainConfig(name="qa", sizes={**SIZES, "train": 60}, options={"path": str(path)}))
    short = QADomain(path=str(path), sizes={**SIZES, "train": 60}, allow_short=True).splits()
    assert len(short["train"]) == 6


def test_one_file_per_split(tmp_path):
    files = {split: str(write_jsonl(tmp_path / f"{split}.jsonl", ROWS[i * 3 : i * 3 + 3]))
             for i, split in enumerate(("train", "search", "val", "test"))}  # fmt: skip
    splits = QADomain(files=files, sizes={"train": 3, "search": 3, "val": 3, "test": 3}).splits()
    assert [t.inputs["question"] for t in splits["val"]] == [r["question"] for r in ROWS[6:9]]


def test_each_verifier(tmp_path):
    rows = [{"q": "Capital of France?", "a": "Paris", "opts": ["Rome", "Paris", "Oslo"]}]
    path = write_jsonl(tmp_path / "one.jsonl", rows)
    tiny = {"train": 0, "search": 0, "val": 0, "test": 1}

    def score(reply, **options):
        domain = QADomain(path=str(path), sizes=tiny, question="q", answer="a", **options)
        return domain.verify(domain.splits()["test"][0], reply, None)

    assert score("  the PARIS. ") == 1.0 and score("Paris, France") == 0.0  # exact, normalised
    assert (
        score("B", verifier="choice", choices="opts") == 1.0
        and score("(A)", verifier="choice", choices="opts") == 0.0
    )
    assert score("The answer is B", verifier="choice", choices="opts") == 1.0
    assert score("paris", verifier="choice", choices="opts") == 1.0  # the text of the right choice
    assert score("Par", verifier="regex") == 0.0 and score("paris", verifier="regex") == 1.0
    numbers = write_jsonl(tmp_path / "n.jsonl", [{"question": "Pi?", "answer": "3.14159"}])
    pi = QADomain(path=str(numbers), sizes=tiny, verifier="numeric", tolerance=1e-3)
    task = pi.splits()["test"][0]
    assert pi.verify(task, "about 3.1416", None) == 1.0 and pi.verify(task, "3.2", None) == 0.0
    assert choice_index("Answer: C", ["x", "y", "z"]) == 2 and choice_index("D", ["x", "y", "z"]) is None
    with pytest.raises(ValueError, match="needs the choices column"):
        QADomain(path=str(path), verifier="choice")
