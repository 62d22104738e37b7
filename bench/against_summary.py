"""Runs of one arm against one method of a committed study summary, paired by seed, as `whale compare`
would table them: for an arm re-run after a change that touches only that arm, whose reference runs
exist only as a summary (docs/results/<study>.json).

    python bench/against_summary.py docs/results/chess-rescue-weight-only.json weight-only \\
        "weight-only+distill (replayed targets)" runs/chess-distill/weight-only+distill/seed* \\
        --save docs/bench/2026-12-05-chess-distill-replayed.json
    python bench/against_summary.py docs/results/chess-rescue-weight-only.json weight-only \\
        "weight-only+distill (replayed targets)" docs/bench/2026-12-05-chess-distill-replayed.json

The arm's runs are run folders or a file written by --save (so the table can be re-made once the folders
are gone). Prints the comparison table (the summary's method is the reference of the paired
differences, on the seeds both sides ran) and the per-seed lines, with the commits each side ran at.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from whale.core.files import atomic_write_json, read_json
from whale.studies.compare import (
    RunData,
    build_rows,
    headers,
    load_run_data,
    md_table,
    per_seed_lines,
    table_cells,
)


def arm_runs(sources: list[Path], label: str) -> list[RunData]:
    if len(sources) == 1 and sources[0].is_file():
        return [RunData(**r) for r in read_json(sources[0])["runs"]]
    return sorted((load_run_data(f, label) for f in sources), key=lambda r: r.seed)


def table(summary: Path, reference: str, label: str, new: list[RunData]) -> str:
    meta = read_json(summary)
    base = [RunData(**r) for r in meta["runs"] if r["method"] == reference]
    if not base:
        raise SystemExit(f"{summary}: no runs of {reference!r}")
    base = [r for r in base if r.seed in {n.seed for n in new}]  # the seeds both sides ran
    rows = build_rows({f"{reference} ({meta['study']})": base, label: new})
    ran = [(reference, base), (label, new)]
    commits = {
        name: ", ".join(sorted({c for r in runs for c in r.commits})) or "unrecorded" for name, runs in ran
    }
    return "\n".join(
        [
            f"{reference}: {len(base)} runs at {commits[reference]}; "
            f"{label}: {len(new)} runs at {commits[label]}",
            "",
            md_table(headers(int(meta["k"]), reference), [table_cells(row) for row in rows]),
            "",
            *per_seed_lines(rows),
        ]
    )


if __name__ == "__main__":
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("summary", type=Path)
    args.add_argument("reference")
    args.add_argument("label")
    args.add_argument("sources", type=Path, nargs="+")
    args.add_argument("--save", type=Path, help="Write the arm's runs here (from run folders).")
    a = args.parse_args()
    runs = arm_runs(a.sources, a.label)
    if a.save:
        atomic_write_json(a.save, {"label": a.label, "runs": [asdict(r) for r in runs]})
    print(table(a.summary, a.reference, a.label, runs))
