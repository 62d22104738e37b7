"""A run's headline numbers from its files: before/after, best test, test at best validation, the diff.

Pure reads (no torch, nothing written), so the report and `whale status` can use it on a live run;
`summarize_run` writes the same thing to summary.json when a run ends.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from whale.core.config import ConfigError
from whale.run.rundir import SEARCH, RunDir


def harness_diff(search: Path, final: str) -> str:
    """Unified diff of the final harness against the seed c0000 ("" when either file is missing)."""
    seed, mine = search / "candidates" / "c0000" / "harness.py", search / "candidates" / final / "harness.py"
    if not seed.is_file() or not mine.is_file():
        return ""
    return "".join(
        difflib.unified_diff(
            seed.read_text().splitlines(True),
            mine.read_text().splitlines(True),
            "seed/harness.py",
            f"{final}/harness.py",
        )  # fmt: skip
    )


def search_gains(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The agent's search-split score, split into what each side changed. The score of the harness in use
    moves in two ways only: a re-evaluation of the same harness under new weights (a weight gain), or an
    accepted challenger under the same weights (a harness gain). The two sums add up to end - start.
    Accepted gains are measured on the tasks they were selected on, so they lean optimistic."""
    start = current = None
    harness_id, weights, harness, accepted = None, 0.0, 0.0, []
    for e in events:
        if e["event"] == "reeval" and current is None:
            start, current, harness_id = e["score"], e["score"], e["harness"]
        elif e["event"] == "reeval" and e["harness"] == harness_id:
            weights, current = weights + e["score"] - current, e["score"]
        elif e["event"] == "search_iteration" and current is not None and e["incumbent"] != harness_id:
            harness += e["incumbent_score"] - current
            accepted.append({"candidate": e["incumbent"], "gain": e["incumbent_score"] - current})
            current, harness_id = e["incumbent_score"], e["incumbent"]
    return {"start": start, "end": current, "weights": weights, "harness": harness, "accepted": accepted}


def best_val_point(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The evaluation point with the best validation mean@k, the earliest on a tie (test is never used)."""
    return max(points, key=lambda p: (p["val"]["mean"], -p["point"]))


def run_summary(out: Path) -> dict[str, Any] | None:
    """The summary of the run in `out` as it stands; None before its first evaluation."""
    run = RunDir(out)
    points = run.points()
    if not points:
        return None
    state = run.read_state()
    config = run.read_config()
    best_test = max(points, key=lambda p: p["test"]["mean"])
    best_val = best_val_point(points)
    final = state.get("incumbent", "c0000")
    switches = [e for e in run.events() if e["event"] == "phase_switch"]
    return {
        "method": config.get("schedule", {}).get("method"),
        "k": config.get("eval", {}).get("k"),
        "points": points,
        "before": points[0]["test"],
        "after": points[-1]["test"],
        "best_test": {"point": best_test["point"], **best_test["test"]},
        "test_at_best_val": {"point": best_val["point"], **best_val["test"]},
        "budget": state["budget"],
        "final_harness": final,
        "harness_diff": harness_diff(out / SEARCH, final),
        "search_gains": search_gains(run.events()),
        "phase_switches": [
            {k: e[k] for k in ("from", "to", "rollouts", "reason", "signals") if k in e} for e in switches
        ],
    }


def summarize_run(out: Path) -> dict[str, Any]:
    """The run's summary (see whale.run.summary), also written to summary.json."""
    summary = run_summary(out)
    if summary is None:
        raise ConfigError(f"{out}: no evaluation points yet")
    RunDir(out).write_summary({k: v for k, v in summary.items() if k != "points"})
    return summary
