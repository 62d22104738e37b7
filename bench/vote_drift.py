"""What weight steps do to a voting harness: per weight step of a run, the operations its sampled votes
named, how many rollouts reached the tool, and which calls were credited for training (docs/weights.md).

    python bench/vote_drift.py RUN_FOLDER [--out FILE.json]

A vote is a model call whose conversation starts with `operands:<tool>`'s system prompt. Steps are told
apart by the weights version the rollouts were sampled under.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

from whale.core.files import read_jsonl
from whale.harness.records import ModelCall, Rollout
from whale.weights.examples import passed, trainable

SYSTEM = "You read problems and say which operation solves them."
WORDS = {
    "+": ("add", "plus", "sum", "addition", "total"),
    "-": ("subtract", "minus", "subtraction", "difference"),
    "*": ("multiply", "times", "multiplication", "product"),
    "/": ("divide", "division", "split", "share"),
}
OPERATION = {w: op for op, words in WORDS.items() for w in words}


def named(text: str) -> str:
    """The operation a vote names first (as the harness reads it), or 'none'."""
    found = [w for w in re.findall(r"[a-z]+", text.lower()) if w in OPERATION]
    return OPERATION[found[0]] if found else "none"


def is_vote(call: ModelCall) -> bool:
    return bool(call.messages) and call.messages[0].get("content") == SYSTEM


def step_row(rollouts: list[Rollout], threshold: float) -> dict:
    votes = [c for r in rollouts for c in r.calls if is_vote(c)]
    kept = [r for r in rollouts if passed(r, threshold)]
    trained = [c for r in kept for c in trainable(r)]
    credited = [c for c in trained if is_vote(c)]
    return {
        "rollouts": len(rollouts),
        "reward": sum(r.reward for r in rollouts) / max(1, len(rollouts)),
        "reached_tool": sum(bool(r.tool_calls) for r in rollouts),
        "votes": dict(Counter(named(c.text) for c in votes)),
        "kept": len(kept),
        "credited_votes": dict(Counter(named(c.text) for c in credited)),
        "credited_other_calls": len(trained) - len(credited),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    config = read_jsonl(args.run / "events.jsonl")[0]["config"]
    threshold = float(config["rft"]["reward_threshold"])
    steps: dict[str, list[Rollout]] = {}
    for row in read_jsonl(args.run / "rollouts" / "train.jsonl"):
        rollout = Rollout.from_json(row)
        steps.setdefault(rollout.weights_version, []).append(rollout)
    rows = [{"weights": w, **step_row(rs, threshold)} for w, rs in steps.items()]
    evals = [
        {"point": e["point"], "weights": e["weights"], "val": e["val"]["mean"], "test": e["test"]["mean"]}
        for e in read_jsonl(args.run / "evals.jsonl")
    ]
    for i, row in enumerate(rows, 1):
        print(
            f"step {i} ({row['weights']}): votes {row['votes']}, reached the tool {row['reached_tool']}/"
            f"{row['rollouts']}, kept {row['kept']}, credited votes {row['credited_votes']}"
        )
    for e in evals:
        print(f"point {e['point']} ({e['weights']}): val {e['val']:.3f}, test {e['test']:.3f}")
    if args.out:
        record = {"run": str(args.run), "config": config, "steps": rows, "evals": evals}
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
