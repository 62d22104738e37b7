"""The remote engine against a real OpenAI-compatible server process on 127.0.0.1 (the tiny model behind
HFEngine, tests/model/openai_model_server.py): exact ids when the server gives them, what a plain server
gives otherwise, bounded concurrency, retries, timeouts, a harness-only run, weight phases refused, and
LoRA adapters following the trainer."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

from whale.core.config import ConfigError, RemoteConfig, load_config
from whale.core.files import read_jsonl
from whale.core.openai_http import EndpointError
from whale.harness.records import ModelCall, Rollout
from whale.model.engine import GenerationRequest, SamplingParams, request_seed
from whale.model.hf_engine import HFEngine
from whale.model.remote_engine import RemoteEngine
from whale.model.trainer import Trainer, TrainerConfig, TrainExample
from whale.run.experiment import Experiment

pytestmark = pytest.mark.slow  # the server process takes seconds to start (torch, the tiny model)

SERVER = Path(__file__).with_name("openai_model_server.py")
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy


@dataclass
class Server:
    root: str
    proc: subprocess.Popen

    @property
    def url(self) -> str:
        return self.root + "/v1"

    def control(self, **settings) -> None:
        req = urllib.request.Request(
            self.root + "/control", data=json.dumps(settings).encode(), method="POST"
        )
        DIRECT.open(req, timeout=10).read()

    def stats(self) -> dict:
        return json.loads(DIRECT.open(self.root + "/stats", timeout=10).read())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, str(SERVER)], stdout=subprocess.PIPE, stderr=err, text=True)
    line = proc.stdout.readline()
    assert line.startswith("PORT "), log.read_text()
    yield Server(f"http://127.0.0.1:{int(line.split()[1])}", proc)
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def fresh(server):
    server.control()  # no scripted failures, no delay, vLLM's extensions on
    return server


def engine_for(server: Server, **settings) -> RemoteEngine:
    return RemoteEngine(RemoteConfig(base_url=server.url, **{"backoff_s": 0.01, **settings}))


def ask(text: str, seed: int | None = None, logprobs: bool = False, **params) -> GenerationRequest:
    sampling = SamplingParams(**{"max_tokens": 8, **params})
    return GenerationRequest([{"role": "user", "content": text}], sampling, seed, logprobs)


def test_a_batch_returns_the_servers_exact_ids_and_counts(fresh, tiny):
    requests = [
        ask("What is 3 + 4?", seed=11),
        ask("Name a fruit.", seed=12, logprobs=True, top_k=20),
        ask("hi", seed=None),  # the engine derives a seed from the batch seed and the request's place
        ask("Count to five.", seed=13, temperature=0.0),
    ]
    gens = engine_for(fresh, token_ids=True, concurrency=3).generate(requests, seed=5)
    local = HFEngine(*tiny)
    for i, (r, g) in enumerate(zip(requests, gens, strict=True)):
        own = GenerationRequest(r.messages, r.params, request_seed(r, 5, i), r.logprobs)
        (want,) = local.generate([own], seed=0)
        assert (g.prompt_ids, g.completion_ids, g.text) == (want.prompt_ids, want.completion_ids, want.text)
        assert g.finish_reason == want.finish_reason
        assert g.usage == {
            "prompt_tokens": len(want.prompt_ids),
            "completion_tokens": len(want.completion_ids),
        }
        assert g.logprobs == (want.logprobs if r.logprobs else None)
    assert gens[1].logprobs and len(gens[1].logprobs) == len(gens[1].completion_ids)


def test_requests_go_out_in_parallel_but_never_more_than_concurrency(fresh):
    fresh.control(delay_s=0.4)
    start = time.monotonic()
    gens = engine_for(fresh, concurrency=3).generate([ask(f"q{i}", seed=i) for i in range(6)], seed=0)
    elapsed = time.monotonic() - start
    assert len(gens) == 6
    assert fresh.stats()["max_in_flight"] == 3
    assert elapsed < 6 * 0.4  # two waves of three, not six one after another


def test_a_plain_openai_server_gives_text_and_counts_but_no_ids(fresh):
    fresh.control(plain=True)
    (g,) = engine_for(fresh).generate([ask("Name a fruit.", seed=1, max_tokens=6)], seed=0)
    assert g.prompt_ids == [] and g.completion_ids == []
    assert g.usage is not None and 1 <= g.usage["completion_tokens"] <= 6 and g.usage["prompt_tokens"] > 3
    assert g.finish_reason in ("eos", "length") and g.logprobs is None
    call = ModelCall([], g.prompt_ids, g.completion_ids, g.text, g.finish_reason, True, {}, usage=g.usage)
    assert Rollout("t", "h", "w0", 0, calls=[call]).generated_tokens == g.usage["completion_tokens"]
    with pytest.raises(EndpointError, match="returned no token ids"):
        engine_for(fresh, token_ids=True).generate([ask("hi", seed=1)], seed=0)


def test_429_is_retried_then_succeeds(fresh):
    fresh.control(fail=[429])
    before = len(fresh.stats()["paths"])
    (g,) = engine_for(fresh, retries=2).generate([ask("hi", seed=1)], seed=0)
    assert g.usage["completion_tokens"] >= 1
    assert len(fresh.stats()["paths"]) - before == 2


def test_usage_the_server_reports_is_checked_against_the_token_ids(fresh, capsys):
    engine = engine_for(fresh, token_ids=True)
    engine.generate([ask("hi", seed=1)], seed=0)
    assert engine.usage_mismatches == 0
    fresh.control(usage_skew=3)
    (g, _) = engine.generate([ask("hi", seed=1), ask("ho", seed=2)], seed=0)
    assert g.usage["completion_tokens"] == len(g.completion_ids) + 3 and engine.usage_mismatches == 2
    warned = [line for line in capsys.readouterr().err.splitlines() if "completion tokens" in line]
    assert len(warned) == 1 and "counts 3 more" in warned[0]  # said once, counted every time


def test_5xx_is_retried_until_the_retries_run_out(fresh):
    fresh.control(fail=[500, 503, 502])
    with pytest.raises(EndpointError) as caught:
        engine_for(fresh, retries=2).generate([ask("hi", seed=1)], seed=0)
    assert "HTTP 502" in str(caught.value) and "after 3 tries" in str(caught.value)
    assert caught.value.status == 502


def test_other_errors_are_not_retried(fresh):
    before = len(fresh.stats()["paths"])
    with pytest.raises(EndpointError, match="HTTP 404.*does not exist"):
        engine_for(fresh, model="no-such-model", retries=3).generate([ask("hi", seed=1)], seed=0)
    assert len(fresh.stats()["paths"]) - before == 1


def test_a_slow_server_times_out_and_a_closed_port_is_unreachable(fresh):
    fresh.control(delay_s=1.5)
    start = time.monotonic()
    with pytest.raises(EndpointError, match="within 0.3 s"):
        engine_for(fresh, timeout_s=0.3, retries=0).generate([ask("hi", seed=1)], seed=0)
    assert time.monotonic() - start < 1.2
    fresh.control()
    closed = RemoteEngine(RemoteConfig(base_url="http://127.0.0.1:9/v1", retries=1, backoff_s=0.01))
    with pytest.raises(EndpointError, match="cannot reach .* \\(after 2 tries\\)"):
        closed.generate([ask("hi")], seed=0)


def run_config(server: Server, tmp_path: Path, *extra: str):
    overrides = [
        "engine.kind=remote", f"engine.remote.base_url={server.url}", "engine.remote.backoff_s=0.01",
        "schedule.budget_rollouts=12", "eval.every_rollouts=12", "eval.k=1", "search.candidates_per_iter=1",
        "domain.sizes={train: 8, search: 4, val: 3, test: 3}", "runner.workers=4", *extra,
    ]  # fmt: skip
    return load_config("tiny", overrides=overrides)


def test_a_harness_only_run_goes_through_the_server(fresh, tmp_path):
    before = fresh.stats()["chat"]
    cfg = run_config(fresh, tmp_path, "schedule.method=harness-only")
    Experiment(cfg, tmp_path / "run").run()
    state = json.loads((tmp_path / "run" / "state.json").read_text())
    budget = state["budget"]
    assert state["finished"] and budget["search_rollouts"] >= 12 and budget["train_rollouts"] == 0
    run = tmp_path / "run"
    copied = [  # an evaluation point that repeats the previous one is copied: charged, not sent
        r for p in read_jsonl(run / "evals.jsonl") if "repeats" in p for split in ("val", "test")
        for r in read_jsonl(run / "evals" / f"{p['point']:03d}" / f"{split}.jsonl")
    ]  # fmt: skip
    sent = budget["model_calls"] - sum(len(r["calls"]) for r in copied)
    assert fresh.stats()["chat"] - before == sent > 0
    calls = [c for line in (tmp_path / "run" / "evals" / "000" / "val.jsonl").read_text().splitlines()
             for c in json.loads(line)["calls"]]  # fmt: skip
    assert calls and all(c["completion_ids"] == [] and c["usage"]["completion_tokens"] >= 1 for c in calls)
    assert budget["generated_tokens"] >= len(calls)
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["engine"]["kind"] == "remote"


def test_weight_phases_refuse_a_remote_engine_without_ids(fresh, tmp_path):
    with pytest.raises(ConfigError, match="harness-only.*engine.remote.token_ids=true") as caught:
        Experiment(run_config(fresh, tmp_path, "schedule.method=whale"), tmp_path / "a")
    assert "\n" not in str(caught.value)
    fresh.control(plain=True)
    cfg = run_config(fresh, tmp_path, "schedule.method=weight-only", "engine.remote.token_ids=true")
    with pytest.raises(ConfigError, match="engine.remote.token_ids: .*returned no token ids"):
        Experiment(cfg, tmp_path / "b")
    cfg = run_config(fresh, tmp_path, "engine.remote.token_ids=true", "weights.lora=false")
    with pytest.raises(ConfigError, match="only through LoRA adapters"):
        Experiment(cfg, tmp_path / "c")
    assert not any((tmp_path / name).exists() for name in "abc")


def test_new_lora_weights_are_loaded_into_the_server(fresh, tmp_path, make_tiny, tokenizer):
    trainer = Trainer(
        make_tiny(0), tokenizer.eos_token_id, TrainerConfig(lora=True, lora_r=4, lr=0.05), seed=0
    )
    engine = RemoteEngine(
        RemoteConfig(base_url=fresh.url, token_ids=True, sync_dir=str(tmp_path / "sync")), trainer.model
    )
    greedy = [ask(q, temperature=0.0) for q in ("What is 3 + 4?", "Name a fruit.", "hi")]
    base = engine.generate(greedy, seed=0)
    for step in (1, 2):
        examples = [TrainExample(g.prompt_ids + [7, 8, 9], [0] * len(g.prompt_ids) + [1] * 3) for g in base]
        trainer.train(examples)
        engine.weights_version = f"w{step}"
        served = engine.generate(greedy, seed=0)
        with torch.no_grad():
            local = HFEngine(trainer.model, tokenizer).generate(greedy, seed=0)
        assert [g.completion_ids for g in served] == [g.completion_ids for g in local]
        assert fresh.stats()["models"] == [f"whale-w{step}"]  # the previous adapter was unloaded
        assert [p.name for p in (tmp_path / "sync").iterdir()] == [f"{step:05d}-w{step}"]
    assert [g.completion_ids for g in served] != [g.completion_ids for g in base]
    paths = fresh.stats()["paths"]
    assert paths.count("/v1/load_lora_adapter") >= 2 and "/v1/unload_lora_adapter" in paths
