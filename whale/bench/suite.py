"""`whale bench`: whale's engine, trainer and rollout pipeline measured beside plain Hugging Face baselines.

One run, one model, the same prompts and lengths on both sides of every comparison:

  roofline  best-of-N matmul GFLOP/s in fp32 and bf16 on the model's own shapes, turned into a tokens/s
            bound with FLOPs/token = 2 x (parameters that take part in a matmul per token);
  engine    HFEngine.generate vs transformers' model.generate on one batch of chat prompts (greedy, left
            padding, both stop at EOS); tokens counted exactly, completions compared token by token;
  trainer   whale's Trainer vs TRL's SFTTrainer (when `trl` is importable) or else a minimal peft + torch
            loop that pads every micro-batch to its longest sequence, both LoRA, same examples and config;
  rollout   RolloutRunner with a multi-call harness on the math domain vs the time spent inside the engine
            during that run: overhead = (pipeline wall - engine time) / pipeline wall;
  workload  the rollout workload a run makes: tasks x k samples of each built-in domain's seed harness
            through RolloutRunner with the default preset's workers and engine batch, per engine kind (fast,
            hf, and vLLM where installed), against transformers' generate with num_return_sequences=k on
            the same first-call prompts.

Every raw number, the ratios computed from them, and the machine's facts go to `<out>/bench.json`; rich
tables go to the console. Ratios are plain quotients of the raw numbers stored beside them (the test
recomputes them). Numbers from a loaded machine are noise: see docs/performance.md.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from whale.bench.engine_bench import bench_engine
from whale.bench.machine import bench_roofline, machine_facts, memory_probe
from whale.bench.rollout_bench import bench_rollout
from whale.bench.settings import (
    FULL,
    OVERHEAD_TARGET,
    QUICK,
    SCHEMA,
    SEED,
    TARGETS,
)
from whale.bench.trainer_bench import bench_trainer, train_examples
from whale.bench.workload_bench import bench_workload
from whale.core.provenance import code_version

# ---- machine facts and memory ----------------------------------------------------------------------------


# ---- roofline ------------------------------------------------------------------------------------------


# ---- engine vs transformers.generate ----------------------------------------------------------------------


# ---- trainer vs SFTTrainer / naive loop --------------------------------------------------------------------


# ---- rollout pipeline ------------------------------------------------------------------------------------


# ---- driver and tables -----------------------------------------------------------------------------------


def run_bench(model: str, out: Path, quick: bool, console: Any) -> dict[str, Any]:
    """Run every part on `model` ("embedded", "tiny", or a folder); write `<out>/bench.json`; print tables."""
    import torch

    from whale.model.loading import load_model

    settings = QUICK if quick else FULL
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)  # before minutes of work, so an unwritable folder fails first

    def log(message: str) -> None:
        console.print(f"[dim]{time.perf_counter() - started:7.1f}s  {message}[/dim]", highlight=False)
        console.file.flush()

    log(f"loading model {model!r}")
    lm, tokenizer = load_model(model, SEED)
    lm.eval()
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "model": model,
        "quick": quick,
        "commit": code_version(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),  # noqa: UP017
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(settings).items()},
        "machine": machine_facts(lm),
        "targets": {**TARGETS, "rollout_overhead_max": OVERHEAD_TARGET},
    }
    with torch.no_grad():
        mem: dict[str, Any] = {}
        with memory_probe(mem):
            result["roofline"] = bench_roofline(lm, settings, log)
        result["roofline"]["memory"] = mem
        mem = {}
        with memory_probe(mem):
            result["engine"], gens = bench_engine(lm, tokenizer, settings, result["roofline"]["bound"], log)
        result["engine"]["memory"] = mem
    # The trainer trains on what the engine generated for the largest batch of prompts.
    examples = train_examples(tokenizer, gens, settings.train_examples)
    mem = {}
    with torch.enable_grad(), memory_probe(mem):
        result["trainer"] = bench_trainer(lm, tokenizer, examples, settings, log)
    result["trainer"]["memory"] = mem
    mem = {}
    with torch.no_grad(), memory_probe(mem):
        result["rollout"] = bench_rollout(lm, tokenizer, settings, log)
    result["rollout"]["memory"] = mem
    mem = {}
    with torch.no_grad(), memory_probe(mem):
        result["workload"] = bench_workload(lm, tokenizer, settings, log)
    result["workload"]["memory"] = mem
    result["machine"]["loadavg_end"] = list(os.getloadavg())
    result["elapsed_s"] = time.perf_counter() - started
    result["verdicts"] = verdicts(result)
    path = out / "bench.json"
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print_tables(result, console)
    console.print(f"bench: {path}")
    return result


def verdicts(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target against the figure it is read from (the largest batch for the engine)."""
    run = max(result["engine"]["runs"], key=lambda r: r["batch"])
    default = default_workload_run(result["workload"])
    rows = [
        ("engine tokens/s vs transformers.generate", run["ratio"], ">=", TARGETS["engine_vs_transformers"]),
        ("engine tokens/s as % of roofline", run["roofline_pct"], ">=", TARGETS["engine_roofline_pct"]),
        (f"trainer vs {result['trainer']['baseline_kind']} baseline", result["trainer"]["ratio"], ">=",
         TARGETS["trainer_vs_baseline"]),
        (f"default engine ({default['kind']}) on the rollout workload vs transformers.generate (math)",
         default["vs_generate"], ">=", TARGETS["engine_vs_transformers"]),
        ("sandbox+IPC share of rollout wall (warm)", result["rollout"]["overhead"], "<=", OVERHEAD_TARGET),
        ("sandbox+IPC share of rollout wall (a fresh worker per rollout)",
         result["rollout"]["overhead_fresh"], "<=", OVERHEAD_TARGET),
    ]  # fmt: skip
    return [
        {"name": name, "value": value, "op": op, "target": target,
         "met": value >= target if op == ">=" else value <= target}
        for name, value, op, target in rows
    ]  # fmt: skip


def default_workload_run(workload: dict[str, Any]) -> dict[str, Any]:
    """The math workload's run on the engine a default config would pick here."""
    return next(r for r in workload["domains"]["math"]["runs"] if r["kind"] == workload["default_kind"])


def _f(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def print_tables(result: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    m = result["machine"]
    facts = Table(title="machine", show_header=False)
    facts.add_row("cpu", f"{m['cpu_model']} ({m['usable_cores']} usable of {m['cpu_count']} cores)")
    facts.add_row("torch", f"{m['versions']['torch']}, {m['torch_threads']} threads, {m['dtype']}")
    facts.add_row("load average", f"start {m['loadavg_start'][0]:.2f}, end {m['loadavg_end'][0]:.2f}")
    facts.add_row("model", f"{result['model']} ({result['roofline']['model']['params_total']:,} params)")
    console.print(facts)

    roof = result["roofline"]
    table = Table(title="roofline: best matmul GFLOP/s")
    for col in ("shape \\[m x k] @ \\[k x n]", "name", "dtype", "GFLOP/s"):
        table.add_column(col)
    for r in roof["matmul"]:
        mm, kk, nn = r["shape"]
        table.add_row(f"\\[{mm}x{kk}] @ \\[{kk}x{nn}]", r["name"], r["dtype"], _f(r["gflops"]))
    console.print(table)
    console.print(
        f"bound ({roof['bound_dtype']}): {_f(roof['bound'])} tokens/s = peak "
        f"{_f(roof['peak_gflops'][roof['bound_dtype']])} GFLOP/s / {roof['model']['flops_per_token']:,} "
        f"FLOPs/token\n[dim]{roof['model']['formula']}[/dim]"
    )

    table = Table(title=f"engine: greedy, {result['engine']['max_new_tokens']} new tokens max")
    for col in ("batch", "engine tok", "engine s", "engine tok/s", "HFEngine tok/s", "HF tok", "HF s",
                "HF tok/s", "ratio", "% roofline", "EOS rows", "greedy match"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in result["engine"]["runs"]:
        e, h = r["engine"], r["transformers"]
        table.add_row(
            str(r["batch"]), str(e["tokens"]), _f(e["seconds"], 2), _f(e["tokens_per_s"]),
            _f(r["plain_engine"]["tokens_per_s"]), str(h["tokens"]), _f(h["seconds"], 2),
            _f(h["tokens_per_s"]), f"{r['ratio']:.2f}x", _f(r["roofline_pct"]),
            f"{e['eos_rows']}/{r['rows']}", f"{r['rows_matching']}/{r['rows']}",
        )  # fmt: skip
    console.print(table)

    t = result["trainer"]
    table = Table(title=f"trainer: LoRA, {t['examples']} examples, baseline = {t['baseline']}")
    for col in ("", "seconds", "completion tok", "completion tok/s", "total tok", "total tok/s"):
        table.add_column(col, justify="right")
    for name, s in (("whale Trainer", t["whale"]), (t["baseline_kind"], t["baseline_result"])):
        table.add_row(
            name, _f(s["seconds"], 2), str(s["completion_tokens"]), _f(s["completion_tokens_per_s"]),
            str(s["total_tokens"]), _f(s["total_tokens_per_s"]),
        )  # fmt: skip
    table.add_row("ratio", "", "", f"{t['ratio']:.2f}x", "", f"{t['ratio_total']:.2f}x")
    console.print(table)

    ro = result["rollout"]
    table = Table(title=f"rollout pipeline: math, {ro['harness']}")
    for col in ("workers", "rollouts", "failed", "wall s", "engine s", "tokens", "tok/s", "overhead"):
        table.add_column(col, justify="right")
    for phase, r in ro["runs"].items():
        table.add_row(
            f"{ro['workers']} ({phase})", str(r["rollouts"]), str(r["failed"]), _f(r["wall_s"], 2),
            _f(r["engine_s"], 2), str(r["generated_tokens"]), _f(r["tokens_per_s"]),
            f"{100 * r['overhead']:.1f}%",
        )  # fmt: skip
    console.print(table)

    wl = result["workload"]
    title = (
        f"rollout workload: seed harnesses, tasks x {wl['k']}, {wl['max_tokens']} tokens at most, "
        f"{wl['workers']} rollouts at once"
    )
    table = Table(title=title)
    for col in ("domain", "engine", "start-up s", "rollouts", "failed", "wall s", "tokens", "tok/s",
                "prompt tok", "computed", "vs generate"):  # fmt: skip
        table.add_column(col, justify="right")
    for name, d in wl["domains"].items():
        for r in d["runs"]:
            table.add_row(
                name, r["kind"], _f(r["startup_s"]), str(r["rollouts"]), str(r["failed"]), _f(r["wall_s"], 2),
                str(r["generated_tokens"]), _f(r["tokens_per_s"]), str(r["prompt_tokens"]),
                str(r["prompt_tokens_computed"]), f"{r['vs_generate']:.2f}x",
            )  # fmt: skip
        if "vllm_alone" in d:
            a = d["vllm_alone"]
            table.add_row(
                name, a["kind"], "", str(d["prompts"] * wl["k"]), "", _f(a["wall_s"], 2),
                str(a["generated_tokens"]), _f(a["tokens_per_s"]), "", "", f"{a['vs_generate']:.2f}x",
            )  # fmt: skip
        g = d["generate"]
        table.add_row(
            name, "transformers.generate", "", str(d["prompts"] * wl["k"]), "", _f(g["wall_s"], 2),
            str(g["generated_tokens"]), _f(g["tokens_per_s"]), "", str(g["prompt_tokens_computed"]), "1.00x",
        )  # fmt: skip
    console.print(table)

    table = Table(title="peak memory of the bench process (MiB)")
    for col in ("part", "RSS at start", "getrusage maxrss", "VmHWM", "scope"):
        table.add_column(col, justify="right")
    for part in ("roofline", "engine", "trainer", "rollout", "workload"):
        mem = result[part]["memory"]
        start, peak = (
            ("n/a" if mem[k] is None else _f(mem[k], 0)) for k in ("rss_start_mib", "peak_rss_mib")
        )
        scope = "this part" if mem["reset"] else "process so far"
        table.add_row(part, start, _f(mem["maxrss_mib"], 0), peak, scope)
    console.print(table)
    w = ro["worker_peak_rss_mib"]
    if w["count"]:
        console.print(
            f"sandbox workers: {w['count']}, peak RSS {_f(w['max'], 0)} MiB each at most, "
            f"{_f(w['sum'], 0)} MiB in all"
        )

    table = Table(title="targets")
    for col in ("figure", "value", "target", "met"):
        table.add_column(col)
    for v in result["verdicts"]:
        value = f"{100 * v['value']:.1f}%" if "share" in v["name"] else f"{v['value']:.2f}"
        target = f"{100 * v['target']:.0f}%" if "share" in v["name"] else f"{v['target']:g}"
        table.add_row(v["name"], value, f"{v['op']} {target}", "yes" if v["met"] else "[red]no[/red]")
    console.print(table)
