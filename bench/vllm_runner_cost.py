"""Where whale's runner loses vLLM's speed: the same math workload (32 tasks x 8 samples) served several
ways by one vLLM engine, with the CPU seconds of each kind of process beside the wall.

    python bench/vllm_runner_cost.py --out docs/bench/DATE-vllm-runner-cost.json [--rounds 2]
        [--dtype float32] [--variants 'runner;runner, workers up;alone, seeded']

- `runner`: whale's RolloutRunner as a run drives it (each call submitted when its harness makes it);
- `runner, prompts cached`: the same with vLLM's prefix cache still holding the warm-up's prompts, as
  `whale bench` and bench/engine_dtypes.py time it (a run's evaluation meets new prompts);
- `runner, lockstep`: vLLM steps only once every started rollout waits on it, so the requests arrive
  together as in one `generate`;
- `runner, workers up`: warmed with enough rollouts to start every sandbox worker the timed part uses
  (the others start most of theirs while vLLM decodes, as a run's evaluation does);
- `runner, workers at nice 19`: the harness workers yield the cores to vLLM's threads;
- `runner, vLLM at nice -10`: vLLM's processes first (root only; a diagnosis, not a setting);
- `alone, seeded`: vLLM's `LLM.generate` on the runner's first prompts, each repeated k times with a seed
  of its own (the requests the runner makes, all at once, without harnesses or sandboxes);
- `alone, n=k`: the same prompts once each with `n=k` (vLLM's own parallel sampling).

Every variant but one is warmed, then its prompts are dropped from vLLM's prefix cache before it is timed.
CPU seconds of the timed part are split into this process (the runner, vLLM's front end and output
processing), vLLM's engine-core and worker processes, and every other process this one started (harness
workers, tools), read from the live processes. Variants alternate within a round.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

import psutil

from whale.bench.machine import machine_facts
from whale.bench.settings import FULL, SEED
from whale.bench.workload_bench import run_concurrency, run_engine, vllm_workload_params
from whale.core.config import DomainConfig, EngineConfig
from whale.core.provenance import code_version
from whale.core.timing import snapshot
from whale.domains.registry import build_domain
from whale.model.backends import build_engine
from whale.model.loading import load_model

GROUPS = ("this process", "vLLM processes", "other children")


def group_of(p: psutil.Process) -> str:
    if p.pid == os.getpid():
        return GROUPS[0]
    return GROUPS[1] if "VLLM" in (" ".join(p.cmdline()) + p.name()).upper() else GROUPS[2]


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of this process and each live descendant, with its group; under -1 the
    ended children's, which the runner's workers become when it closes."""
    me = psutil.Process()
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {-1: (GROUPS[2], ended.ru_utime + ended.ru_stime)}
    for p in [me, *me.children(recursive=True)]:
        try:
            times = p.cpu_times()
            out[p.pid] = (group_of(p), times.user + times.system)
        except psutil.Error:
            continue
    return out


def cpu_split(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per group between two readings. A process that ended in between has its whole life in
    the ended children's total, so what it had at the first reading comes off."""
    split = dict.fromkeys(GROUPS, 0.0)
    for pid, (group, seconds) in after.items():
        split[group] += seconds - before.get(pid, (group, 0.0))[1]
    for pid, (group, seconds) in before.items():
        if pid not in after:
            split[group] -= seconds
    return {g: round(s, 2) for g, s in split.items()}


def set_nice(group: str, value: int) -> None:
    """Renice every live process of a group that this process started."""
    for p in psutil.Process().children(recursive=True):
        try:
            if group_of(p) == group:
                p.nice(value)
        except psutil.Error:
            continue


def alone(engine: Any, prompts: list[list[int]], k: int, seeded: bool) -> tuple[float, int, dict[str, float]]:
    """(wall, generated tokens, CPU split) of one `LLM.generate` of every prompt k times, warmed once and
    then timed on a cold prefix cache."""
    params = vllm_workload_params(engine, FULL)
    engine.llm.generate([{"prompt_token_ids": p} for p in prompts], params(SEED, 1), use_tqdm=False)
    if seeded:
        inputs = [{"prompt_token_ids": p} for p in prompts for _ in range(k)]
        many = [params(SEED * 1000 + i, 1) for i in range(len(inputs))]
    else:
        inputs, many = [{"prompt_token_ids": p} for p in prompts], params(SEED, k)
    engine.llm.reset_prefix_cache()
    before = cpu_seconds()
    start = time.perf_counter()
    outputs = engine.llm.generate(inputs, many, use_tqdm=False)
    wall = time.perf_counter() - start
    return wall, sum(len(c.token_ids) for o in outputs for c in o.outputs), cpu_split(before, cpu_seconds())


def started() -> int:
    """Sandbox workers this process has started so far (whale.core.timing counts them)."""
    return int(sum(parts.get("workers started", 0) for parts in snapshot().values()))


def through_runner(engine: Any, domain: Any, tasks: list[Any], variant: str) -> tuple[dict[str, Any], dict]:
    """One runner variant: its run_engine record and the CPU split of its timed part."""
    workers, _ = run_concurrency()
    readings: list[Any] = []

    def before_timing() -> None:
        if variant.endswith("nice 19"):
            set_nice(GROUPS[2], 19)
        if variant.endswith("nice -10"):
            set_nice(GROUPS[1], -10)
        if not variant.endswith("cached"):
            engine.llm.reset_prefix_cache()
        readings.extend([cpu_seconds(), started()])

    warm_k = -(-workers // len(tasks)) if variant.endswith("workers up") else 1
    try:
        lockstep = variant.endswith("lockstep")
        run = run_engine(engine, domain, tasks, FULL, workers, lockstep, before_timing, warm_k)
        run["workers started"] = started() - readings[1]
        return run, cpu_split(readings[0], cpu_seconds())
    finally:
        set_nice(GROUPS[1], 0)


VARIANTS = (
    "runner",
    "runner, prompts cached",
    "runner, lockstep",
    "runner, workers up",
    "runner, workers at nice 19",
    "runner, vLLM at nice -10",
    "alone, seeded",
    "alone, n=k",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--variants", default=";".join(VARIANTS), help="a ';'-separated subset, in order")
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(";") if v.strip()]
    if unknown := set(variants) - set(VARIANTS):
        raise SystemExit(f"--variants: unknown {sorted(unknown)} (known: {'; '.join(VARIANTS)})")
    model, tokenizer = load_model("embedded", SEED)
    model.eval()
    sizes = {"train": 1, "search": FULL.workload_tasks, "val": 1, "test": 1}
    domain = build_domain(DomainConfig(name="math", seed=SEED, sizes=sizes))
    tasks = domain.splits()["search"]
    _, max_batch = run_concurrency()
    engine = build_engine(EngineConfig(kind="vllm", vllm={"dtype": args.dtype}), model, tokenizer, max_batch)
    result: dict[str, Any] = {"commit": code_version(), "machine": machine_facts(model), "dtype": args.dtype}
    result["runs"] = []
    prompts: list[list[int]] = []
    try:
        for round_ in range(args.rounds):
            for variant in variants:
                if variant.startswith("runner"):
                    run, cpu = through_runner(engine, domain, tasks, variant)
                    prompts = prompts or run["first_prompts"]
                    wall, tokens = run["wall_s"], run["generated_tokens"]
                    extra = {"workers started": run["workers started"]}
                else:
                    wall, tokens, cpu = alone(engine, prompts, FULL.workload_k, variant.endswith("seeded"))
                    extra = {}
                record = {"round": round_, "variant": variant, "wall_s": round(wall, 2), "tokens": tokens,
                          "tokens_per_s": round(tokens / wall, 1), "cpu_s": cpu, **extra}  # fmt: skip
                result["runs"].append(record)
                print(json.dumps(record), flush=True)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(result, indent=1) + "\n")
    finally:
        engine.close()


if __name__ == "__main__":
    main()
