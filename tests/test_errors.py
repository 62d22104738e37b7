"""Every mistake a user can make at the command line: one line saying what and where, exit 2, no traceback,
nothing half-written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_cli import assert_user_error, whale

pytestmark = pytest.mark.slow


def files(tmp: Path) -> dict[str, str]:
    (tmp / "bad.yaml").write_text("model:\n  name: [unclosed\n")
    (tmp / "hostile.py").write_text("import socket\n\n\ndef run(task, llm, tools):\n    return ''\n")
    (tmp / "rows.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n{"question": "no answer"}\n')
    (tmp / "good.py").write_text("def run(task, llm, tools):\n    return ''\n")
    (tmp / "empty").mkdir()
    return {"tmp": str(tmp)}


MISTAKES = [
    # (arguments with {tmp} filled in, words the one-line error must contain)
    (["run", "--preset", "huge"], ["unknown preset 'huge'", "default", "tiny"]),
    (["run", "--config", "{tmp}/bad.yaml"], ["bad.yaml:", "invalid YAML"]),
    (["run", "--preset", "tiny", "--set", "schedule.method=gepa"], ["schedule.method", "'gepa'"]),
    (["run", "--preset", "tiny", "--set", "rft.k"], ["--set 'rft.k'", "key=value"]),
    (["run", "--preset", "tiny", "--set", "domain=poker", "--out", "{tmp}/r1"], ["unknown domain 'poker'"]),
    (
        ["run", "--preset", "tiny", "--set", "domain.harness={tmp}/missing.py", "--out", "{tmp}/r2"],
        ["domain.harness", "missing.py"],
    ),
    (
        [
            "run",
            "--preset",
            "tiny",
            "--set",
            "domain.options.gsm8k_path={tmp}/rows.jsonl",
            "--set",
            "domain.options.strict=true",  # else the bad row is skipped with a summary
            "--out",
            "{tmp}/r3",
        ],
        ["rows.jsonl:2", "strict"],
    ),
    (
        ["run", "--preset", "tiny", "--set", "proposer.kind=llm", "--out", "{tmp}/r4"],
        ["proposer", "base_url"],
    ),
    (
        [
            "run",
            "--preset",
            "tiny",
            "--set",
            "proposer.kind=llm",
            "--set",
            "proposer.base_url=http://127.0.0.1:9/v1",
            "--set",
            "proposer.api_key_env=WHALE_TEST_UNSET_KEY",
            "--out",
            "{tmp}/r5",
        ],
        ["WHALE_TEST_UNSET_KEY"],
    ),
    (
        [
            "run",
            "--preset",
            "tiny",
            "--set",
            "proposer.kind=agent",
            "--set",
            "proposer.command=[no-such-agent-cli]",
            "--out",
            "{tmp}/r6",
        ],
        ["proposer", "no-such-agent-cli", "not found"],
    ),
    (
        ["run", "--preset", "tiny", "--set", "schedule.adaptive.min_search_iters=9"],
        ["min phase length above max"],
    ),
    (["eval", "--harness", "{tmp}/hostile.py", "--domain", "math"], ["hostile.py", "socket"]),
    (["eval", "--harness", "{tmp}/missing.py"], ["harness file not found"]),
    (["eval", "--harness", "{tmp}/good.py", "--domain", "chess", "--split", "holdout"], ["--split holdout"]),
    (["compare", "--methods", "whale,gepa", "--preset", "tiny"], ["unknown method 'gepa'"]),
    (["status", "{tmp}/empty"], ["neither a whale run nor a comparison"]),
    (["archive", "show", "{tmp}/empty"], ["no harness archive"]),
    (["report", "{tmp}/empty"], ["not a whale run"]),
    (["run", "--resume", "{tmp}/empty"], ["no config.yaml"]),
    (["run", "--preset", "paper-chess"], ["'models/Qwen3.5-4B': no such folder"]),
    (
        [
            "run",
            "--preset",
            "tiny",
            "--set",
            "engine.kind=remote",
            "--set",
            "engine.remote.base_url=http://127.0.0.1:9/v1",
            "--out",
            "{tmp}/r7",
        ],
        ["engine.kind=remote", "harness-only", "token_ids"],
    ),  # fmt: skip
]


@pytest.mark.parametrize("args, words", MISTAKES, ids=[" ".join(a[:3]) for a, _ in MISTAKES])
def test_user_mistake_is_one_line(tmp_path, args, words):
    where = files(tmp_path)
    proc = whale(*[a.format(**where) for a in args])
    assert_user_error(proc, *[w.format(**where) for w in words])
    for name in ("r1", "r2", "r3", "r4", "r5", "r6", "r7"):
        assert not (tmp_path / name).exists(), f"{name} was created by a run that failed to start"
