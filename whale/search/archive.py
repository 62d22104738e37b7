"""The archive: every candidate harness with its code, lineage, per-task scores and full traces.

It is a plain folder tree so that any proposer (a mutation script today, a coding agent later) reads it
with ordinary file tools:

    search/candidates/<id>/harness.py
    search/candidates/<id>/meta.json                  parent, hypothesis, proposer, status, reason
    search/candidates/<id>/evals/<weights>.json       per-task scores, mean, cost
    search/candidates/<id>/traces/<weights>.jsonl     full rollouts
    search/frontier.json                              Pareto set: score up, tokens and model calls down
    search/sessions/<iteration>-<kind>-<n>/           LLM and agent proposer sessions: requests, logs
    search/evolution_summary.jsonl                    one line per candidate evaluation
"""

from __future__ import annotations

import ast
import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whale.core.files import append_jsonl, atomic_write_json, atomic_write_text, read_json, read_jsonl
from whale.harness.parsing import parse_untrusted
from whale.harness.records import HarnessCandidate, Rollout


@dataclass
class CandidateEval:
    candidate_id: str
    weights_version: str
    per_task: dict[str, float]  # task id -> mean reward over its rollouts
    mean: float
    tokens_per_rollout: float
    calls_per_rollout: float
    errors: int
    rollouts: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # failed rollouts by kind (search/diagnosis.py)


def code_fingerprint(source: str) -> str:
    """Hash of the code's AST without docstrings: reformatting or re-commenting does not make it new.
    Unparsable code hashes its text."""
    try:
        tree = parse_untrusted(source)
    except SyntaxError:
        return hashlib.sha256(source.encode()).hexdigest()[:16]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]


RESCUE = "rescue"  # the status of a harness written for a weight step's rescue, never scored or searched


class Archive:
    def __init__(self, root: Path):
        self.root = root
        self.candidates_dir = root / "candidates"
        self.candidates_dir.mkdir(parents=True, exist_ok=True)

    def ids(self) -> list[str]:
        return sorted(p.name for p in self.candidates_dir.iterdir() if (p / "meta.json").exists())

    def add(self, candidate: HarnessCandidate, status: str = "proposed", reason: str = "") -> None:
        folder = self.candidates_dir / candidate.id
        atomic_write_text(folder / "harness.py", candidate.source)
        self.set_status(candidate, status, reason)

    def set_status(self, candidate: HarnessCandidate, status: str, reason: str = "") -> None:
        meta = {
            "id": candidate.id,
            "parent": candidate.parent,
            "hypothesis": candidate.hypothesis,
            "proposer": candidate.proposer,
            "status": status,
            "reason": reason,
        }
        if candidate.salt:
            meta["salt"] = candidate.salt
        atomic_write_json(self.candidates_dir / candidate.id / "meta.json", meta)

    def meta(self, candidate_id: str) -> dict[str, Any]:
        return read_json(self.candidates_dir / candidate_id / "meta.json")

    def load(self, candidate_id: str) -> HarnessCandidate:
        meta = self.meta(candidate_id)
        source = (self.candidates_dir / candidate_id / "harness.py").read_text()
        return HarnessCandidate(
            candidate_id, source, meta["parent"], meta["hypothesis"], meta["proposer"], meta.get("salt", "")
        )

    def searched_ids(self) -> list[str]:
        """The candidates the search has seen: all but a weight step's rescue harnesses."""
        return [cid for cid in self.ids() if self.meta(cid)["status"] != RESCUE]

    def fingerprints(self) -> dict[str, str]:
        """Code fingerprint -> the first searched candidate holding that code."""
        out: dict[str, str] = {}
        for cid in self.searched_ids():
            out.setdefault(code_fingerprint((self.candidates_dir / cid / "harness.py").read_text()), cid)
        return out

    def record_eval(self, ev: CandidateEval, rollouts: list[Rollout]) -> None:
        folder = self.candidates_dir / ev.candidate_id
        atomic_write_json(folder / "evals" / f"{ev.weights_version}.json", ev.__dict__)
        traces = folder / "traces" / f"{ev.weights_version}.jsonl"
        traces.unlink(missing_ok=True)
        append_jsonl(traces, [r.to_json() for r in rollouts])
        summary = {k: v for k, v in ev.__dict__.items() if k != "per_task"}
        summary["status"] = self.meta(ev.candidate_id)["status"]
        append_jsonl(self.root / "evolution_summary.jsonl", [summary])

    def evals(self, weights_version: str) -> list[CandidateEval]:
        found = []
        for cid in self.ids():
            path = self.candidates_dir / cid / "evals" / f"{weights_version}.json"
            if path.exists():
                found.append(CandidateEval(**read_json(path)))
        return found

    def update_frontier(self, weights_version: str) -> list[str]:
        """Pareto set over candidates evaluated under these weights: higher mean, fewer tokens and calls."""
        evals = self.evals(weights_version)
        front = [e for e in evals if not any(_dominates(o, e) for o in evals)]
        front.sort(key=lambda e: -e.mean)
        atomic_write_json(
            self.root / "frontier.json",
            {
                "weights_version": weights_version,
                "candidates": [
                    {
                        "id": e.candidate_id,
                        "mean": e.mean,
                        "tokens_per_rollout": e.tokens_per_rollout,
                        "calls_per_rollout": e.calls_per_rollout,
                    }
                    for e in front
                ],  # fmt: skip
            },
        )
        return [e.candidate_id for e in front]

    def eval_history(self, candidate_id: str) -> list[CandidateEval]:
        """Every evaluation of the candidate, oldest weights first."""
        folder = self.candidates_dir / candidate_id / "evals"
        paths = sorted(folder.glob("*.json"), key=_weights_order) if folder.exists() else []
        return [CandidateEval(**read_json(p)) for p in paths]

    def traces(self, candidate_id: str, weights_version: str) -> list[dict[str, Any]]:
        return read_jsonl(self.candidates_dir / candidate_id / "traces" / f"{weights_version}.jsonl")

    def forget_after(self, keep: list[str]) -> None:
        """On resume: drop candidates written after the last checkpoint."""
        for cid in self.ids():
            if cid not in keep:
                shutil.rmtree(self.candidates_dir / cid)
        for stray in self.candidates_dir.iterdir():
            if not (stray / "meta.json").exists():
                shutil.rmtree(stray, ignore_errors=True)


def _dominates(o: CandidateEval, e: CandidateEval) -> bool:
    """o is at least as good as e on score, tokens and calls, and strictly better on one."""
    no_worse = (
        o.mean >= e.mean
        and o.tokens_per_rollout <= e.tokens_per_rollout
        and o.calls_per_rollout <= e.calls_per_rollout
    )
    better = (
        o.mean > e.mean
        or o.tokens_per_rollout < e.tokens_per_rollout
        or o.calls_per_rollout < e.calls_per_rollout
    )
    return no_worse and better


def _weights_order(path: Path) -> tuple[int, str]:
    """w2 before w10; other names after, alphabetically."""
    digits = path.stem[1:]
    return (int(digits), "") if path.stem.startswith("w") and digits.isdigit() else (10**9, path.stem)
