"""FastEngine beyond the shared engine contract (tests/model/test_hf_engine.py runs that on both engines):
requests admitted mid-decode, prefix reuse, a prompt's k samples prefilled once, slot reuse, cancellation,
weights seen after training, LoRA, log-probs, bf16, over-long prompts."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from whale.model.dtype_probe import bf16_numerics, pick_dtype
from whale.model.engine import GenerationRequest, SamplingParams, StepEngine
from whale.model.fast_engine import FastEngine
from whale.model.hf_engine import HFEngine
from whale.model.trainer import Trainer, TrainerConfig, TrainExample, target_logprobs

SYSTEM = {"role": "system", "content": "You are a careful assistant. Solve the problem and answer briefly."}
QUESTIONS = [
    "hi",
    "What is 2 plus 3? Explain it in detail, step by step, with many words.",
    "Name a colour.",
    "Count: one two three four five six seven eight nine ten eleven twelve",
    "x",
    "Sam has 4 apples and buys 7 more. How many apples does he have?",
]
SAMPLED = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_tokens=12)


def seeded(params: SamplingParams = SAMPLED, system: bool = True) -> list[GenerationRequest]:
    head = [SYSTEM] if system else []
    return [
        GenerationRequest(head + [{"role": "user", "content": q}], params, seed=50 + i)
        for i, q in enumerate(QUESTIONS)
    ]


def test_requests_submitted_while_others_decode_get_the_same_tokens(sharp_tiny):
    """Continuous batching: the second half arrives mid-decode and lands in freed or spare slots."""
    reqs = seeded()
    alone = [FastEngine(*sharp_tiny, max_batch=1).generate([r], seed=0)[0] for r in reqs]
    engine = FastEngine(*sharp_tiny, max_batch=4)
    handles = {engine.submit(r, seed=0): i for i, r in enumerate(reqs[:3])}
    results, widths = {}, []
    for step in range(200):
        if step == 2:
            handles |= {engine.submit(r, seed=0): 3 + i for i, r in enumerate(reqs[3:])}
        results.update(engine.step())
        widths.append(len(engine._rows))
        if len(results) == len(reqs):
            break
    assert max(widths) <= 4 and max(widths) == 4
    for handle, i in handles.items():
        assert results[handle].completion_ids == alone[i].completion_ids
        assert results[handle].text == alone[i].text


def test_shared_system_prompt_is_computed_once_and_changes_nothing(sharp_tiny):
    reqs = seeded()
    cached = FastEngine(*sharp_tiny, max_batch=8)
    plain = FastEngine(*sharp_tiny, max_batch=8, prefix_cache_tokens=0)
    a, b = cached.generate(reqs, seed=0), plain.generate(reqs, seed=0)
    assert [g.completion_ids for g in a] == [g.completion_ids for g in b]
    head = len(a[0].prompt_ids) - len(
        FastEngine(*sharp_tiny).tokenizer.apply_chat_template(
            [reqs[0].messages[-1]], add_generation_prompt=True, tokenize=True
        )
    )
    assert cached.prefill_reused > 0 and plain.prefill_reused == 0
    assert cached.prefill_computed < plain.prefill_computed
    # a second batch with the same system prompt reuses the head for every request
    before = cached.prefill_reused
    cached.generate(reqs, seed=1)
    assert cached.prefill_reused - before >= len(reqs) * max(head, 1) // 2


def test_a_prompt_sampled_k_times_is_computed_once_and_each_sample_stays_its_own(sharp_tiny):
    """The runner submits a task's k samples together: one prefill, k copies of its KV and logits."""
    reqs = [
        GenerationRequest(r.messages, r.params, seed=100 + 10 * i + j)
        for i, r in enumerate(seeded()[:3])
        for j in range(4)
    ]
    single = FastEngine(*sharp_tiny, max_batch=1, prefix_cache_tokens=0)
    alone = [single.generate([r], seed=0)[0] for r in reqs]
    engine = FastEngine(*sharp_tiny, max_batch=16, prefix_cache_tokens=0)
    together = engine.generate(reqs, seed=0)
    assert [g.completion_ids for g in together] == [g.completion_ids for g in alone]
    distinct = sum(len(g.prompt_ids) for g in together[::4])
    assert (engine.prefill_computed, engine.prefill_reused) == (distinct, 3 * distinct)
    assert len({tuple(g.completion_ids) for g in together[:4]}) > 1  # each twin samples with its own seed


def test_cancelled_requests_never_come_back_and_the_rest_are_unchanged(sharp_tiny):
    reqs = seeded()
    alone = FastEngine(*sharp_tiny, max_batch=8).generate(reqs, seed=0)
    engine = FastEngine(*sharp_tiny, max_batch=3)
    handles = [engine.submit(r, seed=0) for r in reqs]
    results = dict(engine.step())
    dropped = {handles[0], handles[4]}  # one live, one still queued
    engine.cancel(dropped)
    while engine.busy:
        results.update(engine.step())
    assert dropped.isdisjoint(results)
    for i, h in enumerate(handles):
        if h not in dropped:
            assert results[h].completion_ids == alone[i].completion_ids


def test_training_updates_are_served_without_a_reload_lora_and_full(sharp_tiny):
    for lora in (True, False):
        model = copy.deepcopy(sharp_tiny[0])
        tokenizer = sharp_tiny[1]
        trainer = Trainer(model, tokenizer.eos_token_id, TrainerConfig(lora=lora, lr=0.05), seed=0)
        engine = FastEngine(trainer.model, tokenizer, max_batch=8)
        reference = HFEngine(trainer.model, tokenizer, max_batch=8)
        greedy = seeded(SamplingParams(temperature=0.0, max_tokens=10))
        before = engine.generate(greedy, seed=0)
        target = before[1].prompt_ids + [tokenizer.eos_token_id] * 3
        examples = [TrainExample(target, [0] * len(before[1].prompt_ids) + [1] * 3)] * 4
        trainer.train(examples)
        after = engine.generate(greedy, seed=0)
        assert [g.completion_ids for g in after] == [g.completion_ids for g in reference.generate(greedy, 0)]
        assert [g.completion_ids for g in after] != [g.completion_ids for g in before], lora


def test_logprobs_are_the_trainers_target_logprobs(sharp_tiny):
    model, tokenizer = sharp_tiny
    reqs = [
        GenerationRequest(r.messages, SamplingParams(0.7, 1.0, 0, 8), r.seed, logprobs=True) for r in seeded()
    ]
    gens = FastEngine(model, tokenizer).generate(reqs, seed=0)
    examples = [
        TrainExample(g.prompt_ids + g.completion_ids, [0] * len(g.prompt_ids) + [1] * len(g.completion_ids))
        for g in gens
    ]
    with torch.no_grad():
        ref = target_logprobs(model, examples, tokenizer.eos_token_id, temperature=0.7)
    for g, lp in zip(gens, ref, strict=True):
        assert len(g.logprobs) == len(g.completion_ids)
        assert torch.allclose(torch.tensor(g.logprobs), lp, atol=1e-4)
    assert FastEngine(model, tokenizer).generate(seeded()[:1], seed=0)[0].logprobs is None


def test_bf16_is_close_to_fp32_and_dtype_choice_is_explained(tiny):
    model, tokenizer = tiny
    check = bf16_numerics(model, tokenizer)
    assert check["top1_agree"] and check["max_abs_logprob_diff"] < 0.1
    engine = FastEngine(model, tokenizer, dtype=torch.bfloat16)
    gens = engine.generate(seeded(SamplingParams(temperature=0.0, max_tokens=4)), seed=0)
    assert engine.packed.layers[0].qkv.dtype == torch.bfloat16 and all(g.completion_ids for g in gens)
    assert pick_dtype(model, tokenizer, "float32") == (torch.float32, "float32 requested")
    dtype, why = pick_dtype(model, tokenizer, "auto")  # microsecond matmuls time as noise (0.9x to 150x)
    assert (dtype, why) == (torch.float32, "auto: matmuls too small to time (2 MFLOP), float32")


def test_a_prompt_longer_than_the_model_ends_at_once_and_others_go_on(sharp_tiny: tuple[Any, Any]):
    model, tokenizer = sharp_tiny
    engine = FastEngine(model, tokenizer)
    huge = GenerationRequest([{"role": "user", "content": "word " * (engine.max_positions + 10)}], SAMPLED, 1)
    near = GenerationRequest([{"role": "user", "content": "word " * (engine.max_positions - 40)}], SAMPLED, 2)
    gens = engine.generate([huge, near, seeded()[0]], seed=0)
    assert gens[0].finish_reason == "length" and gens[0].completion_ids == []
    room = engine.max_positions - len(gens[1].prompt_ids)
    assert 0 < room < SAMPLED.max_tokens  # the request asks for more than fits: it is cut at the limit
    assert len(gens[1].completion_ids) <= room and gens[1].completion_ids
    assert gens[2].completion_ids


@pytest.mark.parametrize("max_batch", [1, 2, 5])
def test_slots_are_reused_as_rows_finish(sharp_tiny, max_batch: int):
    reqs = seeded() * 2
    gens = FastEngine(*sharp_tiny, max_batch=max_batch).generate(reqs, seed=0)
    wide = FastEngine(*sharp_tiny, max_batch=16).generate(reqs, seed=0)
    assert [g.completion_ids for g in gens] == [g.completion_ids for g in wide]


def test_the_cache_grows_with_the_live_rows_not_max_batch(sharp_tiny):
    """Few live rows get a small cache; more arriving mid-decode grow it without changing any tokens."""
    reqs = seeded() * 4
    alone = [FastEngine(*sharp_tiny, max_batch=1).generate([r], seed=0)[0] for r in reqs]
    engine = FastEngine(*sharp_tiny, max_batch=64)
    handles = {engine.submit(r, seed=0): i for i, r in enumerate(reqs[:3])}
    results, capacity = {}, []
    for step in range(200):
        if step == 2:
            handles |= {engine.submit(r, seed=0): 3 + i for i, r in enumerate(reqs[3:])}
        results.update(engine.step())
        capacity.append(engine._k[0].shape[0])
        if len(results) == len(reqs):
            break
    assert capacity[0] == 8 and max(capacity) == 32  # 3 rows, then 24: powers of two, never 64
    for handle, i in handles.items():
        assert results[handle].completion_ids == alone[i].completion_ids


def kv_bytes(engine: FastEngine) -> int:
    return sum(t.numel() * t.element_size() for t in engine._k + engine._v)


def test_a_kv_cache_bound_admits_fewer_rows_and_changes_no_tokens(sharp_tiny):
    """kv_cache_gib holds the live rows' cache to its size (here 5 rows of 256 positions, or 2 of 512 once
    a long prompt is in) by admitting fewer rows at once; the tokens are the unbounded engine's. When the
    engine is idle, a cache sized for long rows is given up for one that holds more short rows."""
    pk = FastEngine(*sharp_tiny).packed
    per_row = 2 * len(pk.layers) * pk.kv_heads * pk.head_dim * pk.dtype.itemsize * 256
    budget = 5 * per_row
    long = GenerationRequest([{"role": "user", "content": "Count: " + "one two " * 120}], SAMPLED, seed=9)
    reqs = seeded() * 3 + [long] + seeded()
    engine = FastEngine(*sharp_tiny, max_batch=64, kv_cache_gib=budget / 2**30)
    handles = {engine.submit(r, seed=0): i for i, r in enumerate(reqs)}
    results, live, sizes = {}, [], []
    while len(results) < len(reqs):
        results.update(engine.step())
        live.append(len(engine._rows))
        sizes.append(engine._k[0].shape[2])
        assert kv_bytes(engine) <= budget, (len(engine._rows), engine._k[0].shape)
    assert max(live) == 5 and max(sizes) == 512 and 2 in live  # the bound binds, then the long row's does
    wide = FastEngine(*sharp_tiny, max_batch=64).generate(reqs, seed=0)
    assert [results[h].completion_ids for h in handles] == [g.completion_ids for g in wide]
    engine.generate([long], seed=0)
    assert engine._k[0].shape[2] == 512
    engine.generate(seeded(), seed=0)
    assert engine._k[0].shape[2] == 256 and kv_bytes(engine) <= budget


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "mistral"])
def test_other_llama_family_decoders_match_transformers(tokenizer, family: str):
    """Qwen2 (q/k/v biases), Qwen3 (per-head q/k norms, head_dim not hidden/heads) and Mistral: random tiny
    models with sharpened weights, greedy ids equal to HFEngine's (transformers' own forward)."""
    import transformers

    config_cls, model_cls = {
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[family]
    extra = {"head_dim": 32} if family == "qwen3" else {}
    torch.manual_seed(0)
    model = model_cls(
        config_cls(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
            tie_word_embeddings=True, **extra,
        )
    ).eval()  # fmt: skip
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.mul_(30.0)  # random init is near-uniform: every prompt would greedily give the same tokens
            elif "bias" in name:
                p.normal_(0, 1.0)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    reqs = seeded(SamplingParams(temperature=0.0, max_tokens=10))
    ours = FastEngine(model, tokenizer).generate(reqs, seed=0)
    reference = HFEngine(model, tokenizer).generate(reqs, seed=0)
    assert [g.completion_ids for g in ours] == [g.completion_ids for g in reference]
    assert len({tuple(g.completion_ids) for g in ours}) > 2  # the outputs depend on the prompt


def test_a_model_outside_the_llama_family_is_a_clear_config_error(tokenizer):
    import transformers

    from whale.core.config import ConfigError, EngineConfig
    from whale.model.backends import build_engine

    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2, n_positions=64)
    )
    with pytest.raises(ConfigError, match="use engine.kind=hf"):
        build_engine(EngineConfig(kind="fast", dtype="float32"), gpt2, tokenizer, 4)
    assert build_engine(EngineConfig(kind="hf"), gpt2, tokenizer, 4).generate(seeded()[:1], seed=0)


def test_the_step_engine_protocol_tells_continuous_engines_from_batch_ones(sharp_tiny):
    """The runner steps an engine between worker polls only when it takes requests one by one."""
    from whale.harness.runner import RolloutRunner

    fast, hf = FastEngine(*sharp_tiny, max_batch=2), HFEngine(*sharp_tiny, max_batch=2)
    assert isinstance(fast, StepEngine) and not isinstance(hf, StepEngine)
    assert RolloutRunner(fast, None, SamplingParams()).continuous
    assert not RolloutRunner(hf, None, SamplingParams()).continuous
