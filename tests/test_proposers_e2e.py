"""`whale run` with the LLM proposer against a real OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import pytest

from tests.cli.test_cli import check_complete_run, whale
from tests.search.openai_server import ScriptedOpenAI, chat_reply
from whale.core.files import read_json, read_jsonl
from whale.domains.math import MathDomain

pytestmark = pytest.mark.slow

SEED = MathDomain(seed=0, sizes={"train": 1, "search": 1, "val": 1, "test": 1}).seed_harness()


def variant(i: int) -> str:
    source = SEED.replace('SYSTEM_PROMPT = "', f'SYSTEM_PROMPT = "Variant {i}. ', 1)
    assert source != SEED
    return f"HYPOTHESIS: a different system prompt ({i})\n```python\n{source}```\n"


def test_llm_proposer_end_to_end_until_its_budget_is_spent(tmp_path):
    out = tmp_path / "run"
    script = [chat_reply("I would rather not write code.", tokens=50)] + [
        chat_reply(variant(i), tokens=300) for i in range(20)
    ]
    with ScriptedOpenAI(script) as server:
        proc = whale(
            "run", "--preset", "tiny", "--out", str(out),
            "--set", "proposer.kind=llm", "--set", f"proposer.base_url={server.url}",
            "--set", "proposer.max_sessions=3", "--set", "schedule.budget_rollouts=150",
        )  # fmt: skip
        requests = list(server.requests)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = check_complete_run(out)

    # three calls, then the budget stops the proposer, not the run
    assert len(requests) == 3 and state["proposer_usage"]["sessions"] == 3
    assert state["proposer_usage"]["tokens"] == 50 + 300 + 300
    assert state["proposer_spent"].startswith("proposer budget spent: 3 of 3 sessions")
    first = requests[0]["body"]
    context = "\n".join(m["content"] for m in first["messages"])
    assert "SYSTEM_PROMPT" in context and "c0000" in context  # the parent's code and id
    assert "run(task, llm, tools)" in context  # the brief's harness contract
    retry = "\n".join(m["content"] for m in requests[1]["body"]["messages"])
    assert "could not be used" in retry  # the code-less reply was retried with the reason

    llm_candidates = [c for c in state["candidates"] if read_json(out / f"search/candidates/{c}/meta.json")
                      ["proposer"] == "llm"]  # fmt: skip
    assert len(llm_candidates) == 2
    for cid in llm_candidates:
        meta = read_json(out / f"search/candidates/{cid}/meta.json")
        assert meta["hypothesis"].startswith("a different system prompt")
        assert meta["status"] in ("evaluated", "rejected", "accepted")
    sessions = sorted(p.name for p in (out / "search/sessions").iterdir())
    assert len(sessions) == 3 and all("-llm-" in s for s in sessions)

    events = read_jsonl(out / "events.jsonl")
    switches = [e for e in events if e["event"] == "phase_switch"]
    assert any(e["reason"].startswith("proposer budget spent") for e in switches)
    after = events.index(next(e for e in switches if e["reason"].startswith("proposer budget spent")))
    assert all(e["event"] != "search_iteration" for e in events[after:])  # weights took the rest
    assert any(e["event"] == "weight_step" for e in events[after:])
    iterations = [e for e in events if e["event"] == "search_iteration"]
    assert iterations and all(e["proposal"] for e in iterations)
