"""The edition's regime, engine against engine: `whale run` two at a time, each pinned to its own share of
the cores (as `whale results --jobs 2` pins its runs), variant after variant.

    python bench/two_at_a_time.py --out docs/bench/DATE-two-at-a-time.json --runs DIR
        [--kinds fast,vllm] [--seeds 0,1] [--preset default] [--set key=value ...]

For each variant (`KIND[:DTYPE]`, as `whale bench --end-to-end` takes them) the seeds run at once, seed i
on core slot i, so a variant's pair meets the neighbour it would meet in an edition: itself. Reports each
run's wall, its split into parts and its test mean@k, and per variant the pair's wall (the later finish)
and budget rollouts per hour over both runs, against the first variant's, and its test mean@k minus the
first variant's, paired over seeds then tasks at the validation-selected and the last point
(`whale.studies.compare`), so that a faster variant which learned less shows. A finished run's record is
reused (its folder stays under --runs, readable with `whale view`).
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from whale.bench.end_to_end import one_run, parse_variants
from whale.core.provenance import code_version, machine
from whale.studies.compare import RunData, load_run_data, paired_seeds, verdict
from whale.studies.pool import core_slots


def scores_against(runs: list[RunData], first: list[RunData]) -> dict[str, Any]:
    diffs = {pick: paired_seeds(runs, first, pick=pick) for pick in ("selected", "last")}
    return {pick: {**asdict(d), "verdict": verdict(d)} for pick, d in diffs.items()}


def pair(kind: str, preset: str, seeds: list[int], sets: list[str], runs: Path) -> list[dict[str, Any]]:
    """The variant's runs, all at once, seed i on slot i; each record is kept beside its folder."""
    slots = core_slots(len(seeds))
    if slots is None:
        raise SystemExit(f"{len(seeds)} runs at once need at least as many usable cores")
    folders = [runs / f"{kind.replace(':', '-')}-seed{seed}" for seed in seeds]
    records = [f.parent / f"{f.name}.json" for f in folders]
    if all(r.exists() for r in records):
        return [json.loads(r.read_text()) for r in records]
    with ThreadPoolExecutor(len(seeds)) as pool:
        made = list(
            pool.map(
                lambda i: one_run(kind, preset, [f"seed={seeds[i]}", *sets], folders[i], cores=slots[i]),
                range(len(seeds)),
            )
        )
    for record, run, seed, folder in zip(records, made, seeds, folders, strict=True):
        run |= {"seed": seed, "folder": str(folder)}
        record.write_text(json.dumps(run, indent=1) + "\n")
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--kinds", default="fast,vllm")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--preset", default="default")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    args.runs.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"commit": code_version(), "machine": machine(), "preset": args.preset}
    result |= {"sets": args.sets, "seeds": seeds, "variants": {}}
    data: dict[str, list[RunData]] = {}
    for kind in parse_variants(args.kinds):
        runs = pair(kind, args.preset, seeds, args.sets, args.runs)
        data[kind] = [load_run_data(Path(r["folder"]), kind) for r in runs]
        wall = max(r["wall_s"] for r in runs)
        rollouts = sum(r["budget_rollouts"] for r in runs)
        variant = {"pair_wall_s": wall, "rollouts_per_hour": round(3600 * rollouts / wall), "runs": runs}
        first = next(iter(result["variants"].values()), variant)
        variant["speedup"] = round(first["pair_wall_s"] / wall, 3)
        if result["variants"]:
            variant["test_minus_first"] = scores_against(data[kind], next(iter(data.values())))
        result["variants"][kind] = variant
        print(
            json.dumps({"variant": kind, "walls": [r["wall_s"] for r in runs], "speedup": variant["speedup"]})
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
