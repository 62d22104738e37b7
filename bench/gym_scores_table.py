"""A `whale gym-scores --out FILE` file as markdown for docs/domains.md: the families in the study range
first, then every family's row, so the table in the docs is generated from the committed file.

    python bench/gym_scores_table.py docs/bench/2026-12-05-gym-scores.json
"""

from __future__ import annotations

import sys
from pathlib import Path

from whale.core.files import read_json
from whale.domains.gym import UNSUPPORTED


def cells(name: str, row: dict, k: int, low: float, high: float) -> list[str]:
    if "refused" in row:
        return [f"refused: {row['refused']}", "-", "-", "-"]
    if name in UNSUPPORTED:  # refused since the scan: its score does not mean what it says
        return [f"refused since: {UNSUPPORTED[name]} (scored {row['mean']:.3f})", "-", "-", "-"]
    inside = "yes" if low <= row["mean"] <= high else "no"
    mean = f"{row['mean']:.3f} [{row['ci'][0]:.3f}, {row['ci'][1]:.3f}]"
    return [mean, f"{row['pass_at_k']:.3f}", f"{row['solved']:.3f}", inside]


def markdown(scores: dict) -> str:
    k, tasks, low, high = scores["k"], scores["tasks"], scores["low"], scores["high"]
    rows = scores["datasets"]
    scored = {n: r for n, r in rows.items() if "refused" not in r and n not in UNSUPPORTED}
    inside = [n for n, r in scored.items() if low <= r["mean"] <= high]
    inside.sort(key=lambda n: -scored[n]["mean"])
    solving = [n for n, r in scored.items() if r["solved"] > 0]
    commits = sorted({r["commit"] for r in scored.values()})
    lines = [
        f"{len(rows)} families, {tasks} test tasks x k={k} each, at {', '.join(commits)}: "
        f"{len(inside)} in [{low:g}, {high:g}] ({', '.join(inside) or 'none'}); {len(solving)} solved at "
        f"least one sample outright; {len(rows) - len(scored)} refused (since the scan).",
        "",
        f"| dataset | seed mean@{k} [95% CI] | pass@{k} | solved | in [{low:g}, {high:g}] |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(rows):
        lines.append(f"| {name} | " + " | ".join(cells(name, rows[name], k, low, high)) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(read_json(Path(sys.argv[1]))))
