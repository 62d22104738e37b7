"""FastEngine at another commit against the working tree's, on the math rollout workload, alternated in one
process, so that an engine change is measured side by side.

    python bench/fast_engine_ab.py --old REV --out docs/bench/DATE-fast-engine-ab.json [--rounds 2]

The old engine is `whale/model/fast_engine.py` as it was at REV, loaded as a module of its own; everything
else (runner, harness, model) is the working tree's. 32 math tasks x 8 samples of the seed harness, at the
default run's concurrency, each engine fresh in every round. The same seeds give both engines the same
draws unless the change alters the numbers, so generated tokens and mean reward are kept beside the speed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from whale.bench.machine import machine_facts
from whale.bench.settings import FULL, SEED
from whale.bench.workload_bench import run_concurrency, run_engine
from whale.core.config import DomainConfig
from whale.core.provenance import code_version
from whale.domains.registry import build_domain
from whale.model.fast_engine import FastEngine
from whale.model.loading import load_model


def engine_at(rev: str) -> type:
    source = subprocess.run(
        ["git", "show", f"{rev}:whale/model/fast_engine.py"], capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "fast_engine_at_rev.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("fast_engine_at_rev", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module.FastEngine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="the commit whose fast engine is the baseline")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    model, tokenizer = load_model("embedded", SEED)
    model.eval()
    sizes = {"train": 1, "search": FULL.workload_tasks, "val": 1, "test": 1}
    domain = build_domain(DomainConfig(name="math", seed=SEED, sizes=sizes))
    tasks = domain.splits()["search"]
    workers, max_batch = run_concurrency()
    engines = {f"old ({args.old})": engine_at(args.old), "new (working tree)": FastEngine}
    result = {"commit": code_version(), "old": args.old, "machine": machine_facts(model), "runs": []}
    for round_ in range(args.rounds):
        for name, engine_class in engines.items():
            engine = engine_class(model, tokenizer, max_batch=max_batch)
            run = run_engine(engine, domain, tasks, FULL, workers)
            run.pop("first_prompts")
            run.update(engine=name, round=round_)
            result["runs"].append(run)
            print(json.dumps(run), flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
