"""Why the chess study starts at zero: what a random legal move would score, and what the agent played.

    python examples/chess_floor.py runs/results/chess/whale/seed0 [point]

Prints, for the run's preset splits, the chance that a uniformly random legal move mates (the score a
harness that shows the legal moves and a model that picks among them blindly would get), then sorts the
test rollouts of one evaluation point (default 0, the start) by what became of the agent's move.
"""

from __future__ import annotations

import statistics
import sys
from collections import Counter
from pathlib import Path

import chess
import yaml

from whale.core.config import config_from_dict
from whale.core.files import read_jsonl
from whale.domains.registry import build_domain


def random_move_scores(run: Path) -> dict[str, float]:
    """Per split: the mean over tasks of (mating moves / legal moves)."""
    path = run / "config.yaml"
    cfg = config_from_dict(yaml.safe_load(path.read_text()), str(path))
    splits = build_domain(cfg.domain).splits()
    return {
        split: statistics.mean(
            len(t.gold["mates"]) / chess.Board(t.inputs["fen"]).legal_moves.count() for t in tasks
        )
        for split, tasks in splits.items()
    }


def first_move_outcome(rollout: dict) -> str:
    """'solved', 'legal, not mate', 'illegal' (the toolbox refused it) or 'no move' (nothing played)."""
    if rollout["reward"] >= 1.0:
        return "solved"
    plays = [c for c in rollout["tool_calls"] if c["name"] == "play"]
    if not plays:
        return "no move"
    return "illegal" if plays[0]["error"] else "legal, not mate"


def main(run: Path, point: int) -> None:
    for split, score in random_move_scores(run).items():
        print(f"{split}: a random legal move mates with probability {score:.3f} (mean over tasks)")
    rollouts = read_jsonl(run / "evals" / f"{point:03d}" / "test.jsonl")
    outcomes = Counter(first_move_outcome(r) for r in rollouts)
    moves = Counter(str(c["args"][0]) for r in rollouts for c in r["tool_calls"][:1] if c["args"])
    print(
        f"point {point}, {len(rollouts)} test rollouts, first move: "
        + ", ".join(f"{name} {n}" for name, n in outcomes.most_common())
    )
    print("most played first moves: " + ", ".join(f"{m} x{n}" for m, n in moves.most_common(5)))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) == 3 else 0)
