"""Harness-only runs read back: what the search changed under fixed weights, and whether it is real.

    python bench/harness_only.py RUN_DIR [RUN_DIR ...]      # one folder per seed of one setting

Per run: test mean@k at the start (seed harness) and the end (the accepted harness, same weights), the
accepted lineage with the mechanism each step added, and the challenger rollouts each search decision
cost. Over the runs: the end-minus-start test difference with a paired interval that resamples seeds,
then tasks. Prints markdown for docs/proposers.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

from whale.core.files import read_json
from whale.core.hierarchical import seed_task_difference
from whale.run.rundir import RunDir
from whale.studies.compare import per_task_rewards


def lineage(search: Path, final: str) -> list[str]:
    """What each ancestor of `final` added, from the seed on (not every ancestor was accepted)."""
    steps, cid = [], final
    while cid and cid != "c0000":
        meta = read_json(search / "candidates" / cid / "meta.json")
        steps.append(f"{cid}: {meta['proposer']} {meta['hypothesis']}")
        cid = meta["parent"]
    return steps[::-1]


def describe(folder: Path) -> tuple[dict[str, float], str]:
    run = RunDir(folder)
    points = run.points()
    first, last = points[0], points[-1]
    start, end = (
        per_task_rewards(folder, first["point"], "test"),
        per_task_rewards(folder, last["point"], "test"),
    )
    searches = [e for e in run.events() if e["event"] == "search_iteration"]
    decided = [e.get("decision_rollouts") or 0 for e in searches]
    accepted = sum(e["accepted"] for e in searches)
    final = run.read_state().get("incumbent", "c0000")
    steps = "; ".join(lineage(folder / "search", final)) or "seed kept"
    row = (
        f"| {folder.name} | {first['test']['mean']:.3f} | {last['test']['mean']:.3f} | "
        f"{first['val']['mean']:.3f} -> {last['val']['mean']:.3f} | {accepted}/{len(searches)} | "
        f"{sum(decided) / max(1, len(decided)):.0f} | {steps} |"
    )
    return {t: end[t] - start[t] for t in start}, row


def main(folders: list[Path]) -> None:
    columns = "run, test start, test end, val start -> end, accepted, rollouts per decision, ancestry"
    print("| " + " | ".join(columns.split(", ")) + " |")
    print("|---" * len(columns.split(", ")) + "|")
    diffs = []
    for folder in folders:
        d, row = describe(folder)
        diffs.append(d)
        print(row)
    pd = seed_task_difference(diffs)
    print(
        f"\nend - start, test mean@k over {len(folders)} seeds: {pd.mean_diff:+.3f} "
        f"[95% CI {pd.ci_low:+.3f}, {pd.ci_high:+.3f}] (seeds, then tasks, resampled)"
    )


if __name__ == "__main__":
    main([Path(a) for a in sys.argv[1:]])
