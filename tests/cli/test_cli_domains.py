"""Every built-in domain and a user's one-file domain run through the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli import assert_user_error, check_complete_run, whale

from whale.core.files import read_jsonl

pytestmark = pytest.mark.slow
REVERSE = Path(__file__).resolve().parents[1] / "fixtures" / "reverse_domain.py"


@pytest.mark.parametrize("domain", ["chess", "searchqa"])
def test_tiny_run_on_each_builtin_domain(tmp_path, domain):
    out = tmp_path / domain
    proc = whale("run", "--preset", "tiny", "--set", f"domain={domain}", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_complete_run(out)
    rollout = read_jsonl(out / "rollouts/train.jsonl")[0]
    assert rollout["task_id"].startswith(domain)
    assert read_jsonl(out / "events.jsonl")[0]["config"]["domain"]["name"] == domain


def test_user_domain_file_runs_and_bad_files_are_one_line_errors(tmp_path):
    out = tmp_path / "reverse"
    proc = whale("run", "--preset", "tiny", "--domain-file", str(REVERSE), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_complete_run(out)
    assert read_jsonl(out / "rollouts/train.jsonl")[0]["task_id"].startswith("rev-train-")

    assert_user_error(
        whale("run", "--preset", "tiny", "--domain-file", str(tmp_path / "nope.py")), "not found"
    )
    broken = tmp_path / "broken.py"
    broken.write_text("def make_domain(seed, sizes):\n    return object()\n")
    assert_user_error(whale("run", "--preset", "tiny", "--domain-file", str(broken)), "missing splits")


def test_domains_eval_and_harness_check_commands(tmp_path):
    listing = whale("domains")
    assert listing.returncode == 0, listing.stderr[-2000:]
    for name in ("math", "chess", "searchqa"):
        assert name in listing.stdout

    harness = tmp_path / "h.py"
    harness.write_text(
        "def run(task, llm, tools):\n    return llm.chat([{'role': 'user', 'content': 'hi'}])\n"
    )
    scored = whale("eval", "--harness", str(harness), "--preset", "tiny", "--k", "2", "--split", "val")
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert "mean@2" in scored.stdout and "pass@2" in scored.stdout and "rollouts" in scored.stdout

    ok = whale("harness", "check", str(harness))
    assert ok.returncode == 0 and "smoke test passed" in ok.stdout, ok.stdout + ok.stderr[-2000:]
    hostile = tmp_path / "hostile.py"
    hostile.write_text("import os\ndef run(task, llm, tools):\n    return os.getcwd()\n")
    bad = whale("harness", "check", str(hostile))
    assert bad.returncode == 1 and "line 1: import of 'os' is not allowed" in bad.stdout
    crashing = tmp_path / "crash.py"
    crashing.write_text("def run(task, llm, tools):\n    return 1 / 0\n")
    crash = whale("harness", "check", str(crashing))
    assert crash.returncode == 1 and "ZeroDivisionError" in crash.stdout
