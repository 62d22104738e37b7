"""`whale.bench.suite`: one quick run on the tiny model; every section present, ratios are the quotients of
the raw numbers stored beside them, and the engine's greedy completions equal transformers' own."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rich.console import Console

from whale.bench.suite import run_bench, verdicts
from whale.core.config import load_config
from whale.core.provenance import code_version

SECTIONS = ("machine", "roofline", "engine", "trainer", "rollout", "workload", "verdicts")


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any], str]:
    out = tmp_path_factory.mktemp("bench") / "results" / "quick"  # run_bench creates missing folders
    console = Console(record=True, width=160)
    returned = run_bench("tiny", out, quick=True, console=console)
    written = json.loads((out / "bench.json").read_text())
    return returned, written, console.export_text()


def close(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=1e-9, abs=1e-12)


def test_the_json_holds_every_section_and_the_machine_facts(bench) -> None:
    returned, written, _ = bench
    assert written == json.loads(json.dumps(returned))
    for section in SECTIONS:
        assert section in written, section
    m = written["machine"]
    assert m["cpu_model"] and m["cpu_count"] >= 1 and m["torch_threads"] >= 1
    assert m["versions"]["torch"] and m["dtype"] == "float32"
    assert written["model"] == "tiny" and written["quick"] is True
    assert written["commit"] == code_version()  # every number names the code it came from
    for part in ("roofline", "engine", "trainer", "rollout", "workload"):
        assert written[part]["memory"]["maxrss_mib"] > 0, part


def test_roofline_bound_is_peak_flops_over_flops_per_token(bench) -> None:
    roof = bench[1]["roofline"]
    model = roof["model"]
    assert model["tied_embeddings"] is True  # the tiny model ties its LM head to the embeddings
    assert model["flops_per_token"] == 2 * model["params_matmul"] == 2 * model["params_total"]
    assert "FLOPs/token" in model["formula"]
    for r in roof["matmul"]:
        m, k, n = r["shape"]
        assert r["gflops"] > 0 and close(r["gflops"], 2 * m * k * n / r["best_s"] / 1e9)
    for dtype in ("float32", "bfloat16"):
        peak = max(r["gflops"] for r in roof["matmul"] if r["dtype"] == dtype)
        assert close(roof["peak_gflops"][dtype], peak)
        assert close(roof["bound_tokens_per_s"][dtype], peak * 1e9 / model["flops_per_token"])
    best = max(roof["bound_tokens_per_s"].values())
    assert close(roof["bound"], best) and close(roof["bound_tokens_per_s"][roof["bound_dtype"]], best)


def test_engine_figures_ratios_and_greedy_match(bench) -> None:
    written = bench[1]
    engine, bound = written["engine"], written["roofline"]["bound"]
    assert engine["runs"] and engine["greedy_match"] is True
    for run in engine["runs"]:
        e, h = run["engine"], run["transformers"]
        for side in (e, h):
            assert side["tokens"] > 0 and side["seconds"] > 0
            assert close(side["tokens_per_s"], side["tokens"] / side["seconds"])
            assert side["tokens"] <= run["batch"] * engine["max_new_tokens"]
        assert e["tokens"] == h["tokens"]  # identical completions, so identical counts
        assert run["greedy_match"] is True and run["rows_matching"] == run["rows"] == run["batch"]
        assert close(run["ratio"], e["tokens_per_s"] / h["tokens_per_s"])
        assert close(run["roofline_pct"], 100 * e["tokens_per_s"] / bound)
        incl = (e["tokens"] + run["prompt_tokens"]) / e["seconds"]
        assert close(run["roofline_pct_incl_prompt"], 100 * incl / bound)
        plain = run["plain_engine"]
        assert plain["tokens"] == e["tokens"] and run["plain_rows_matching"] == run["rows"]
        assert close(run["plain_ratio"], plain["tokens_per_s"] / h["tokens_per_s"])
        assert run["prompt_tokens_computed"] + run["prompt_tokens_reused"] == run["prompt_tokens"]


def test_trainer_figures_and_ratio(bench) -> None:
    t = bench[1]["trainer"]
    assert t["baseline_kind"] in ("trl", "naive")
    assert t["baseline"] == ("trl.SFTTrainer" if t["baseline_kind"] == "trl" else t["baseline"])
    w, b = t["whale"], t["baseline_result"]
    assert w["completion_tokens"] == b["completion_tokens"] > 0
    assert w["total_tokens"] == b["total_tokens"] > w["completion_tokens"]
    assert w["reported_tokens"] == w["completion_tokens"]  # the Trainer's own count agrees with the bench's
    for side in (w, b):
        assert side["seconds"] > 0 and side["completion_tokens_per_s"] > 0
        assert close(side["completion_tokens_per_s"], side["completion_tokens"] / side["seconds"])
        assert close(side["total_tokens_per_s"], side["total_tokens"] / side["seconds"])
    assert close(t["ratio"], w["completion_tokens_per_s"] / b["completion_tokens_per_s"])
    assert close(t["ratio_total"], w["total_tokens_per_s"] / b["total_tokens_per_s"])


def test_rollout_overhead_is_the_share_of_wall_time_outside_the_engine(bench) -> None:
    ro = bench[1]["rollout"]
    assert set(ro["runs"]) == {"cold", "warm", "barrier", "fresh"} and ro["engine"] == "FastEngine"
    assert close(ro["continuous_speedup"], ro["runs"]["barrier"]["wall_s"] / ro["runs"]["warm"]["wall_s"])
    for run in ro["runs"].values():
        assert run["rollouts"] > 0 and run["failed"] == 0, run["error_kinds"]
        assert run["model_calls"] == 3 * run["rollouts"] and run["tool_calls"] == run["rollouts"]
        assert run["engine_requests"] == run["model_calls"]
        assert 0 < run["engine_s"] <= run["wall_s"]
        assert run["generated_tokens"] > 0 and run["tokens_per_s"] > 0
        assert close(run["tokens_per_s"], run["generated_tokens"] / run["wall_s"])
        assert close(run["overhead"], (run["wall_s"] - run["engine_s"]) / run["wall_s"])
    assert close(ro["overhead"], ro["runs"]["warm"]["overhead"])
    assert close(ro["overhead_fresh"], ro["runs"]["fresh"]["overhead"])


def test_the_workload_runs_each_seed_harness_on_each_engine_and_generate_on_first_prompts(bench) -> None:
    wl = bench[1]["workload"]
    assert wl["kinds"] == ["fast", "hf"]  # the tiny model has no folder for vLLM to load
    assert set(wl["domains"]) == {"math", "searchqa", "chess"}
    default = load_config("default", None, [])  # the engines see as many rollouts at once as a run gives them
    assert (wl["workers"], wl["max_batch"]) == (default.runner.workers, default.model.max_batch)
    for name, d in wl["domains"].items():
        assert [r["kind"] for r in d["runs"]] == wl["kinds"]
        assert d["prompts"] == d["tasks"] > 0, name
        g = d["generate"]
        assert g["generated_tokens"] > 0 and close(g["tokens_per_s"], g["generated_tokens"] / g["wall_s"])
        assert g["prompt_tokens_computed"] >= d["prompts"] * wl["k"]
        for r in d["runs"]:
            assert r["rollouts"] == d["tasks"] * wl["k"] and r["failed"] == 0, (name, r["kind"])
            assert r["workers"] == wl["workers"]
            assert r["model_calls"] >= r["rollouts"] and r["generated_tokens"] > 0
            assert close(r["tokens_per_s"], r["generated_tokens"] / r["wall_s"])
            assert close(r["vs_generate"], r["tokens_per_s"] / g["tokens_per_s"])
            assert 0 < r["prompt_tokens_computed"] <= r["prompt_tokens"]
        fast, hf = d["runs"]
        assert fast["dtype"] == hf["dtype"] == "float32"  # auto on the tiny model: too small to time bf16
        assert hf["prompt_tokens_computed"] == hf["prompt_tokens"]  # the reference engine caches nothing
        assert fast["generated_tokens"] == hf["generated_tokens"], name  # the same samples on both engines


def test_verdicts_read_the_stated_figures_and_the_tables_are_printed(bench) -> None:
    written, text = bench[1], bench[2]
    assert written["verdicts"] == json.loads(json.dumps(verdicts(written)))
    for v in written["verdicts"]:
        assert v["met"] == (v["value"] >= v["target"] if v["op"] == ">=" else v["value"] <= v["target"])
    for title in ("roofline", "engine", "trainer", "rollout pipeline", "rollout workload", "peak memory",
                  "targets"):  # fmt: skip
        assert title in text, title
    assert "bench.json" in text
