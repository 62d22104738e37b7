"""DPO: pairs of a passing and a failing rollout of the same task under the same harness."""

from __future__ import annotations

from whale.harness.records import Rollout
from whale.model.trainer import TrainExample
from whale.weights.examples import call_examples, groups_of, passed, trainable


def dpo_contributions(
    rollouts: list[Rollout], threshold: float, max_pairs_per_task: int
) -> list[tuple[Rollout, list[TrainExample]]]:
    """Pairs of a passing and a failing rollout of one task under one harness, matched in sample order;
    each rollout is used at most once."""
    out, pair = [], 0
    for group in groups_of(rollouts).values():
        usable = [r for r in group if trainable(r)]
        chosen = [r for r in usable if passed(r, threshold)]
        rejected = [r for r in usable if not passed(r, threshold)]
        for good, bad in list(zip(chosen, rejected, strict=False))[:max_pairs_per_task]:
            out.append((good, call_examples(good, pair=pair, chosen=True)))
            out.append((bad, call_examples(bad, pair=pair, chosen=False)))
            pair += 1
    return out
