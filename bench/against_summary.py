"""Runs in folders against one method of a committed study summary, paired by seed, as `whale compare`
would table them: for an arm re-run after a change that touches only that arm, whose reference runs
exist only as a summary (docs/results/<study>.json).

    python bench/against_summary.py docs/results/chess-rescue-weight-only.json weight-only \\
        "weight-only+distill (replayed targets)" runs/chess-distill/weight-only+distill/seed*

Prints the comparison table (the summary's method first, the reference of the paired differences) and
the per-seed lines, with the commits each side ran at.
"""

from __future__ import annotations

import sys
from pathlib import Path

from whale.core.files import read_json
from whale.studies.compare import (
    RunData,
    build_rows,
    headers,
    load_run_data,
    md_table,
    per_seed_lines,
    table_cells,
)


def main(summary: Path, reference: str, label: str, folders: list[Path]) -> str:
    meta = read_json(summary)
    base = [RunData(**r) for r in meta["runs"] if r["method"] == reference]
    if not base:
        raise SystemExit(
            f"{summary}: no runs of {reference!r}; it has {sorted({r['method'] for r in meta['runs']})}"
        )
    new = sorted((load_run_data(f, label) for f in folders), key=lambda r: r.seed)
    base = [r for r in base if r.seed in {n.seed for n in new}]  # the seeds both sides ran
    rows = build_rows({f"{reference} ({meta['study']})": base, label: new})
    commits = {
        name: sorted({c for r in runs for c in r.commits}) for name, runs in ((reference, base), (label, new))
    }
    lines = [
        f"{reference}: {len(base)} runs at {', '.join(commits[reference]) or 'unrecorded'}; "
        f"{label}: {len(new)} runs at {', '.join(commits[label]) or 'unrecorded'}",
        "",
        md_table(headers(int(meta["k"]), reference), [table_cells(row) for row in rows]),
        "",
        *per_seed_lines(rows),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(main(Path(sys.argv[1]), sys.argv[2], sys.argv[3], [Path(a) for a in sys.argv[4:]]))
