"""Archive bookkeeping: code fingerprints, the three-way Pareto frontier, evaluation history."""

from whale.core.files import read_json
from whale.harness.records import HarnessCandidate
from whale.search.archive import Archive, CandidateEval, code_fingerprint

CODE = 'def run(task, llm, tools):\n    return "1"\n'


def test_code_fingerprint_ignores_formatting_comments_and_docstrings():
    same = '"""A docstring."""\n\n\ndef run(task, llm, tools):  # comment\n    """Doc."""\n    return \'1\'\n'
    assert code_fingerprint(same) == code_fingerprint(CODE)
    assert code_fingerprint(CODE.replace('"1"', '"2"')) != code_fingerprint(CODE)
    assert code_fingerprint("def broken(:\n") != code_fingerprint("def broken2(:\n")  # text hash fallback


def ev(cid: str, mean: float, tokens: float, calls: float, weights: str = "w1") -> CandidateEval:
    return CandidateEval(cid, weights, {"t": mean}, mean, tokens, calls, 0)


def test_frontier_keeps_score_token_and_call_tradeoffs(tmp_path):
    archive = Archive(tmp_path / "search")
    for cid, mean, tokens, calls in (
        ("c0000", 0.5, 100, 1),  # on the frontier
        ("c0001", 0.6, 200, 1),  # better score, more tokens: on it
        ("c0002", 0.5, 100, 3),  # same as c0000 with more calls: dominated
        ("c0003", 0.4, 100, 0.5),  # fewer calls: on it
        ("c0004", 0.4, 300, 3),  # dominated by everything
    ):
        archive.add(HarnessCandidate(cid, CODE))
        archive.record_eval(ev(cid, mean, tokens, calls), [])
    assert archive.update_frontier("w1") == ["c0001", "c0000", "c0003"]
    front = read_json(tmp_path / "search/frontier.json")
    assert [c["calls_per_rollout"] for c in front["candidates"]] == [1, 1, 0.5]
    assert archive.fingerprints() == {code_fingerprint(CODE): "c0000"}


def test_eval_history_orders_weights_numerically(tmp_path):
    archive = Archive(tmp_path / "search")
    archive.add(HarnessCandidate("c0000", CODE))
    for weights in ("w10", "w2", "w0"):
        archive.record_eval(ev("c0000", 0.1, 1, 1, weights), [])
    assert [e.weights_version for e in archive.eval_history("c0000")] == ["w0", "w2", "w10"]
    assert archive.traces("c0000", "w2") == []
