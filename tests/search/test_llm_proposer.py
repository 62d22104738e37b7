"""LLM proposer against a real HTTP server on 127.0.0.1: archive context, retries, budgets, failures."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import socket

import pytest
from openai_server import ScriptedOpenAI, chat_reply

from whale.core.config import ProposerConfig
from whale.core.files import read_json
from whale.harness.records import HarnessCandidate, ModelCall, Rollout, ToolCall
from whale.search.archive import Archive, CandidateEval
from whale.search.llm_prompt import build_messages
from whale.search.llm_proposer import LLMProposer, parse_reply
from whale.search.proposer import ProposalRequest, ProposerUsage, full_brief

WV = "w-0003"
BRIEF = full_brief("Add two integers. BRIEF-MARKER-91: a tool `add(a, b)` is available.")
SEED = """\
PROMPT = "add these: SEED-CODE-MARKER"


def run(task, llm, tools):
    reply = llm.chat([{"role": "user", "content": PROMPT + str(task)}])
    return reply.strip()
"""
FRONTIER = SEED.replace("SEED-CODE-MARKER", "FRONTIER-CODE-MARKER")
NEW = """\
import re


def run(task, llm, tools):
    return str(tools.add(task["a"], task["b"]))
"""
GOOD_REPLY = f"""Looking at the failing traces, the model never calls the tool.

BASE: c0000
HYPOTHESIS: call the add tool directly instead of trusting the model's arithmetic

```python
{NEW}```
"""


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    """Requests to the local server must not go through a proxy configured in the environment."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def rollout(
    cid: str, task: str, reward: float, error: str | None = None, pad: int = 0, calls: int = 1
) -> Rollout:
    call = ModelCall(
        messages=[{"role": "user", "content": f"PROMPT-MARKER {task} " + "p" * pad}],
        prompt_ids=[1, 2, 3],
        completion_ids=[4, 5],
        text=f"REPLY-MARKER {task} " + "r" * pad,
        finish_reason="stop",
        train=True,
        params={"max_tokens": 64},
    )
    tool = ToolCall("add", [1, 2], {}, result=3 if error is None else None, error=error and "TOOL-ERR-MARKER")
    answer = f"ANSWER-{task}"
    return Rollout(task, cid, WV, 0, answer, reward, error, calls=[call] * calls, tool_calls=[tool] * calls)


def build_archive(root, frontier: int = 1, pad: int = 0, n_traces: int = 4, calls: int = 1) -> Archive:
    """c0000 seed (evaluated, with traces), an invalid c0001, then `frontier` evaluated frontier members."""
    archive = Archive(root / "search")
    archive.add(HarnessCandidate("c0000", SEED, None, "seed harness", "seed"), status="seed")
    rollouts = [rollout("c0000", f"t{i}", 0.0, "ERROR-MARKER boom" if i == 0 else None, pad, calls)
                for i in range(n_traces - 1)]  # fmt: skip
    rollouts.append(rollout("c0000", "t-pass", 1.0, pad=pad, calls=calls))
    per_task = {r.task_id: r.reward for r in rollouts}
    archive.record_eval(CandidateEval("c0000", WV, per_task, 0.25, 12.0, 1.0, 1), rollouts)
    bad = HarnessCandidate("c0001", "import os\n", "c0000", "use os for speed", "llm")
    archive.add(bad, status="invalid", reason="INVALID-REASON-MARKER line 1: import of 'os' is not allowed")
    for i in range(frontier):
        cid = f"c{i + 2:04d}"
        archive.add(HarnessCandidate(cid, FRONTIER.replace("MARKER", f"MARKER-{cid}"), "c0000", "f", "llm"),
                    status="evaluated")  # fmt: skip
        ev = CandidateEval(cid, WV, {"t0": 0.5}, 0.5, 30.0, 2.0, 0)
        archive.record_eval(ev, [rollout(cid, "t0", 0.0, pad=pad, calls=calls)])
    return archive


def request_for(archive: Archive, n: int = 1, iteration: int = 1) -> ProposalRequest:
    parents = [archive.load(cid) for cid in archive.ids() if cid != "c0001"]
    counter = itertools.count(len(archive.ids()))
    return ProposalRequest(archive, parents, n, lambda: f"c{next(counter):04d}", WV, BRIEF, iteration)


def config(url: str, **kw) -> ProposerConfig:
    return ProposerConfig(**{"kind": "llm", "base_url": url, "model": "test-model", "timeout_s": 5.0, **kw})


def sessions(archive: Archive) -> list:
    return sorted((archive.root / "sessions").iterdir())


def text_of(body: dict) -> str:
    return "\n".join(m["content"] for m in body["messages"])


def test_good_reply_becomes_a_candidate_and_the_request_carries_the_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("WHALE_TEST_KEY", "sk-local-123")
    archive = build_archive(tmp_path)
    usage = ProposerUsage()
    with ScriptedOpenAI([chat_reply(GOOD_REPLY, tokens=321, cost=0.004)]) as server:
        proposer = LLMProposer(config(server.url, api_key_env="WHALE_TEST_KEY", temperature=0.3), usage)
        proposal = proposer.propose(request_for(archive))
    assert proposer.name == "llm"
    (cand,) = proposal.candidates
    assert cand.source == NEW and cand.id == "c0003" and cand.parent == "c0000" and cand.proposer == "llm"
    assert cand.hypothesis == "call the add tool directly instead of trusting the model's arithmetic"
    assert not proposal.exhausted and proposal.note.startswith("1 candidate from 1 call")
    assert proposal.cost["calls"] == 1 and proposal.cost["tokens"] == 321
    assert proposal.cost["usd"] == pytest.approx(0.004)
    assert usage.sessions == 1 and usage.tokens == 321 and usage.usd == pytest.approx(0.004)

    (req,) = server.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["authorization"] == "Bearer sk-local-123"
    body = req["body"]
    assert body["model"] == "test-model" and body["temperature"] == 0.3 and body["max_tokens"] == 4096
    assert body["messages"][0]["role"] == "system" and "BRIEF-MARKER-91" in body["messages"][0]["content"]
    assert "# Harness contract" in body["messages"][0]["content"]
    prompt = body["messages"][-1]["content"]
    assert "SEED-CODE-MARKER" in prompt and "FRONTIER-CODE-MARKER-c0002" in prompt  # both parents' code
    assert (
        "mean reward 0.250 over 4 tasks (1 solved, 3 scored 0)" in prompt and "12 generated tokens" in prompt
    )
    assert "mean reward 0.500" in prompt
    for marker in (
        "PROMPT-MARKER t0",
        "REPLY-MARKER t0",
        "ERROR-MARKER boom",
        "ANSWER-t0",
        "TOOL-ERR-MARKER",
    ):
        assert marker in prompt
    assert prompt.index("failing trace of c0000") < prompt.index("passing trace of c0000")
    assert "REPLY-MARKER t-pass" in prompt
    assert "INVALID-REASON-MARKER" in prompt and "use os for speed" in prompt  # past mistakes
    assert "HYPOTHESIS:" in prompt and "```python" in prompt

    (folder,) = sessions(archive)
    assert folder.name == "0001-llm-0"
    assert read_json(folder / "request.json")["messages"] == body["messages"]
    assert (folder / "reply.txt").read_text() == GOOD_REPLY
    result = read_json(folder / "result.json")
    assert result["status"] == "ok" and result["candidate"] == "c0003" and result["tokens"] == 321
    assert "sk-local-123" not in (folder / "request.json").read_text()


def test_parent_selection_and_named_base(tmp_path):
    archive = build_archive(tmp_path, frontier=6)
    request = request_for(archive)
    shown_sets = []
    for seed in range(4):
        reply = GOOD_REPLY.replace("BASE: c0000", "BASE: c0007")
        with ScriptedOpenAI([chat_reply(reply)]) as server:
            proposal = LLMProposer(config(server.url, parents=3), ProposerUsage(), seed=seed).propose(request)
        prompt = text_of(server.requests[0]["body"])
        shown = sorted(
            {c for c in (f"c{i:04d}" for i in range(2, 8)) if f"FRONTIER-CODE-MARKER-{c}" in prompt}
        )
        assert "SEED-CODE-MARKER" in prompt and len(shown) == 2  # the incumbent plus two of six
        shown_sets.append(tuple(shown))
        (cand,) = proposal.candidates
        assert cand.parent == ("c0007" if "c0007" in shown else "c0000")  # BASE only counts if shown
        for folder in sessions(archive):  # next seed starts from a clean session folder and archive
            for f in folder.iterdir():
                f.unlink()
            folder.rmdir()
    assert len(set(shown_sets)) > 1  # the draw depends on the seed


def test_unset_api_key_variable_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("WHALE_TEST_MISSING_KEY", raising=False)
    with pytest.raises(ValueError, match="WHALE_TEST_MISSING_KEY"):
        LLMProposer(config("http://127.0.0.1:9/v1", api_key_env="WHALE_TEST_MISSING_KEY"), ProposerUsage())
    with pytest.raises(ValueError, match="base_url"):
        LLMProposer(ProposerConfig(kind="llm"), ProposerUsage())


def test_malformed_replies_are_retried_with_the_reason_then_given_up(tmp_path):
    archive = build_archive(tmp_path)
    bad_import = (
        "HYPOTHESIS: use os\n```python\nimport os\n\n\ndef run(task, llm, tools):\n    return os.sep\n```\n"
    )
    script = [chat_reply("I would change the prompt.", tokens=10), chat_reply(bad_import, tokens=20)]
    usage = ProposerUsage()
    with ScriptedOpenAI(script) as server:
        proposal = LLMProposer(config(server.url, retries=1), usage).propose(request_for(archive))
    assert proposal.candidates == [] and not proposal.exhausted
    assert len(server.requests) == 2 and usage.sessions == 2 and usage.tokens == 30
    first, second = (r["body"]["messages"] for r in server.requests)
    assert second[: len(first)] == first
    assert second[len(first)] == {"role": "assistant", "content": "I would change the prompt."}
    assert second[-1]["content"] == (
        "Your reply could not be used: no python block. Reply with one complete ```python block."
    )
    assert "gave up on 1 candidate" in proposal.note and "import of 'os' is not allowed" in proposal.note
    assert "2 unusable replies" in proposal.note and proposal.note.startswith("0 candidates from 2 calls")
    results = [read_json(f / "result.json") for f in sessions(archive)]
    assert [r["status"] for r in results] == ["unusable", "given_up"]
    assert results[0]["reason"] == "no python block" and "'os'" in results[1]["reason"]


def test_a_retry_can_succeed_and_duplicates_are_retried(tmp_path):
    archive = build_archive(tmp_path)
    same_as_seed = f"HYPOTHESIS: keep it\n```python\n{SEED}```"
    broken = "HYPOTHESIS: tool first\n```python\ndef run(task, llm, tools)\n    return 1\n```"
    script = [
        chat_reply(same_as_seed),
        chat_reply(broken),
        chat_reply(GOOD_REPLY.replace("BASE: c0000\n", "")),
    ]
    with ScriptedOpenAI(script) as server:
        proposal = LLMProposer(config(server.url, retries=2), ProposerUsage()).propose(request_for(archive))
    (cand,) = proposal.candidates
    assert cand.source == NEW and cand.parent == "c0000"
    assert "same as c0000" in server.requests[1]["body"]["messages"][-1]["content"]
    assert "syntax error" in server.requests[2]["body"]["messages"][-1]["content"]
    assert proposal.note.startswith("1 candidate from 3 calls; 2 unusable replies")
    assert [read_json(f / "result.json")["status"] for f in sessions(archive)] == [
        "unusable",
        "unusable",
        "ok",
    ]


def test_budget_in_sessions_and_tokens(tmp_path):
    archive = build_archive(tmp_path)
    usage = ProposerUsage()
    with ScriptedOpenAI([chat_reply(GOOD_REPLY, tokens=77), chat_reply(GOOD_REPLY)]) as server:
        proposer = LLMProposer(config(server.url, max_sessions=1), usage)
        first = proposer.propose(request_for(archive, n=2))
        second = proposer.propose(request_for(archive, n=2, iteration=2))
    assert len(first.candidates) == 1 and first.exhausted  # the second candidate would exceed the budget
    assert "proposer budget spent: 1 of 1 sessions used" in first.note
    assert second.candidates == [] and second.exhausted and second.cost["calls"] == 0
    assert second.note == "proposer budget spent: 1 of 1 sessions used"
    assert len(server.requests) == 1 and usage.sessions == 1 and usage.tokens == 77
    assert len(sessions(archive)) == 1

    usage = ProposerUsage()
    with ScriptedOpenAI([chat_reply(GOOD_REPLY, tokens=600), chat_reply(GOOD_REPLY)]) as server:
        proposal = LLMProposer(config(server.url, max_tokens=500), usage).propose(request_for(archive, n=3))
    assert len(server.requests) == 1 and len(proposal.candidates) == 1 and proposal.exhausted
    assert usage.tokens == 600 and "600 of 500 tokens" in proposal.note


@pytest.mark.parametrize(
    ("script", "expect"),
    [
        ([(500, '{"error": "overloaded"}')], "HTTP 500"),
        ([(200, "<html>gateway</html>")], "not JSON"),
        ([(200, '{"object": "error", "message": "bad model"}')], "no choices[0].message"),
        ([0.6, chat_reply(GOOD_REPLY)], "within 0.2 s"),
    ],
)
def test_endpoint_trouble_gives_an_empty_proposal_with_a_note(tmp_path, script, expect):
    archive = build_archive(tmp_path)
    usage = ProposerUsage()
    with ScriptedOpenAI(script) as server:
        cfg = config(server.url, timeout_s=0.2, http_retries=0)
        proposal = LLMProposer(cfg, usage).propose(request_for(archive, n=3))
    assert proposal.candidates == [] and not proposal.exhausted
    assert expect in proposal.note and proposal.note.startswith("0 candidates from 1 call")
    assert len(server.requests) == 1 and usage.sessions == 1  # no more calls after the endpoint failed
    (folder,) = sessions(archive)
    assert read_json(folder / "result.json")["status"] == "error"
    assert expect in (folder / "error.txt").read_text()


def test_a_rate_limited_endpoint_is_retried_with_backoff_until_it_answers(tmp_path):
    """Two 429s, then the reply: the openai client's one call succeeds on the third send."""
    archive = build_archive(tmp_path)
    usage = ProposerUsage()
    script = [(429, '{"error": {"message": "slow down"}}')] * 2 + [chat_reply(GOOD_REPLY)]
    with ScriptedOpenAI(script) as server:
        proposal = LLMProposer(config(server.url, backoff_s=0.05), usage).propose(request_for(archive, n=1))
    assert len(proposal.candidates) == 1, proposal.note
    assert len(server.requests) == 3 and usage.sessions == 1  # one proposer call, sent three times
    with ScriptedOpenAI([(429, '{"error": "still"}')] * 3) as server:
        cfg = config(server.url, backoff_s=0.01, http_retries=2)
        proposal = LLMProposer(cfg, ProposerUsage()).propose(request_for(build_archive(tmp_path / "b"), n=1))
    assert proposal.candidates == [] and "HTTP 429" in proposal.note and "(after 3 tries)" in proposal.note
    assert len(server.requests) == 3


def test_unreachable_endpoint(tmp_path):
    archive = build_archive(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: nothing listens there
    usage = ProposerUsage()
    proposal = LLMProposer(config(f"http://127.0.0.1:{port}/v1"), usage).propose(request_for(archive, n=2))
    assert proposal.candidates == [] and "cannot reach" in proposal.note and usage.sessions == 1
    assert proposal.cost["calls"] == 1 and proposal.cost["tokens"] == 0


def test_context_stays_within_context_chars_with_many_long_traces(tmp_path):
    archive = build_archive(tmp_path, frontier=3, pad=20_000, n_traces=40, calls=30)
    second = GOOD_REPLY.replace("tools.add(", "tools.add(0 + ").replace("directly", "at once " + "x" * 400)
    with ScriptedOpenAI([chat_reply(GOOD_REPLY), chat_reply(second)]) as server:
        proposal = LLMProposer(config(server.url, context_chars=6000, parents=4), ProposerUsage()).propose(
            request_for(archive, n=2)
        )
    assert len(proposal.candidates) == 2
    for req in server.requests:
        prompt = text_of(req["body"])
        assert len(prompt) <= 6000
        assert "SEED-CODE-MARKER" in prompt and "failing trace of c0000" in prompt
        assert "ERROR-MARKER boom" in prompt  # the crashed rollout is shown first
        assert prompt.count("failing trace of") >= 2  # each trace is cut, so several fit
    assert "Already proposed this round" in text_of(server.requests[1]["body"])
    big = json.dumps(server.requests[0]["body"])
    assert "p" * 1000 not in big  # long messages inside a trace are cut


def test_a_huge_brief_and_parent_are_cut_to_fit(tmp_path):
    archive = build_archive(tmp_path, frontier=0)
    request = request_for(archive)
    huge_code = SEED + "".join(f"KNOB_{i} = {'x' * 80!r}\n" for i in range(400))
    request.brief = full_brief("BRIEF-START " + "b" * 30_000)
    request.parents = [dataclasses.replace(request.parents[0], source=huge_code)]
    messages = build_messages(request, request.parents, 5000, random.Random(0))
    text = text_of({"messages": messages})
    assert len(text) <= 5000 and "BRIEF-START" in text and "SEED-CODE-MARKER" in text and "chars cut" in text


def test_parse_reply_edge_cases():
    cut = parse_reply("HYPOTHESIS: x\n```python\ndef run(task, llm, tools):\n    return '", "length")
    assert cut.source is None and "max_reply_tokens" in cut.reason
    fenced_inside = (
        "HYPOTHESIS: **format hint**\n```python\nHINT = '''\n```\nanswer here\n```\n'''\n\n\n"
        "def run(task, llm, tools):\n    return HINT\n```\n"
    )
    parsed = parse_reply(fenced_inside)
    assert (
        parsed.reason == "" and parsed.source.startswith("HINT = '''") and parsed.hypothesis == "format hint"
    )
    commented = parse_reply(
        "```python\n# HYPOTHESIS: old\ndef run(task, llm, tools):\n    return ''\n```\nHYPOTHESIS: new"
    )
    assert commented.reason == "" and commented.hypothesis == "new"
    bare = parse_reply("```\ndef run(task, llm, tools):\n    return '1'\n```")
    assert bare.reason == "" and bare.source == "def run(task, llm, tools):\n    return '1'\n"
