"""The engine contract on the real tiny Llama, for both in-process engines (HFEngine, FastEngine): exact
ids, decoding, stop strings, per-row limits, determinism, agreement with transformers' generate."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from whale.model.engine import GenerationRequest, SamplingParams
from whale.model.fast_engine import FastEngine
from whale.model.hf_engine import HFEngine
from whale.model.sampling import chat_prompt_ids, sample_next

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
PROMPTS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "user", "content": "What is 2 plus 3? Explain it in detail, step by step, with many words."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "Count: one two three four five six seven eight nine ten eleven twelve"}],
    [{"role": "user", "content": "x"}],
    [{"role": "user", "content": "Sam has 4 apples and buys 7 more. How many apples does he have?"}],
]


@pytest.fixture(scope="module", params=[HFEngine, FastEngine], ids=["hf", "fast"])
def engine(request: pytest.FixtureRequest, sharp_tiny: tuple[Any, Any]) -> HFEngine | FastEngine:
    return request.param(*sharp_tiny, max_batch=64)


def requests(params: SamplingParams | list[SamplingParams], prompts=PROMPTS) -> list[GenerationRequest]:
    if isinstance(params, SamplingParams):
        params = [params] * len(prompts)
    return [GenerationRequest(m, p) for m, p in zip(prompts, params, strict=True)]


def test_prompt_ids_are_the_chat_template_and_text_is_the_decoded_completion(engine):
    tok = engine.tokenizer
    params = [SamplingParams(temperature=1.0, max_tokens=m) for m in [3, 5, 8, 13, 21, 4]]
    gens = engine.generate(requests(params), seed=11) + engine.generate(requests(GREEDY), seed=0)
    assert len(gens) == 2 * len(PROMPTS)
    reasons = {g.finish_reason for g in gens}
    assert reasons == {"eos", "length"}, reasons  # the fixture model must exercise both endings
    for g, msgs in zip(gens, PROMPTS + PROMPTS, strict=True):
        assert g.prompt_ids == chat_prompt_ids(tok, msgs)
        assert tok.decode(g.completion_ids, skip_special_tokens=True) == g.text
        assert g.completion_ids, "every generation has at least one token"
        if g.finish_reason == "eos":
            assert g.completion_ids[-1] == tok.eos_token_id
            assert tok.eos_token_id not in g.completion_ids[:-1]
            assert tok.eos_token not in g.text
        else:
            assert tok.eos_token_id not in g.completion_ids


def test_max_tokens_is_respected_per_row(engine):
    limits = [1, 2, 3, 5, 8, 13]
    params = [SamplingParams(temperature=0.0, max_tokens=m) for m in limits]
    gens = engine.generate(requests(params), seed=0)
    full = engine.generate(requests(SamplingParams(temperature=0.0, max_tokens=13)), seed=0)
    for g, f, limit in zip(gens, full, limits, strict=True):
        assert len(g.completion_ids) <= limit
        if g.finish_reason == "length":
            assert len(g.completion_ids) == limit
        # a shorter limit only truncates the same greedy continuation
        assert g.completion_ids == f.completion_ids[: len(g.completion_ids)]
    assert any(g.finish_reason == "length" for g in gens)


def test_stop_string_cuts_text_before_it(engine):
    tok = engine.tokenizer
    probe = engine.generate(requests(SamplingParams(temperature=0.0, max_tokens=16)), seed=0)
    checked = 0
    for msgs, full in zip(PROMPTS, probe, strict=True):
        if len(full.completion_ids) < 4:
            continue
        full_text = tok.decode(full.completion_ids, skip_special_tokens=True)
        stop = tok.decode(full.completion_ids[2:3], skip_special_tokens=True).strip()
        if not stop or full_text.find(stop) <= 0:
            continue
        params = SamplingParams(temperature=0.0, max_tokens=16, stop=("never-in-output-zz", stop))
        (g,) = engine.generate([GenerationRequest(msgs, params)], seed=0)
        decoded = tok.decode(g.completion_ids, skip_special_tokens=True)
        assert g.finish_reason == "stop"
        assert decoded.startswith(g.text)
        assert stop not in g.text and stop in decoded
        assert g.text == full_text[: full_text.find(stop)]
        # decoding stopped at the first token that completed the stop string
        assert g.completion_ids == full.completion_ids[: len(g.completion_ids)]
        assert stop not in tok.decode(g.completion_ids[:-1], skip_special_tokens=True)
        checked += 1
    assert checked >= 2


def test_same_seed_same_samples_and_different_seed_differs(engine):
    params = SamplingParams(temperature=1.0, max_tokens=10)
    a = engine.generate(requests(params), seed=5)
    b = engine.generate(requests(params), seed=5)
    c = engine.generate(requests(params), seed=6)
    assert [g.completion_ids for g in a] == [g.completion_ids for g in b]
    assert [g.text for g in a] == [g.text for g in b]
    assert [g.completion_ids for g in a] != [g.completion_ids for g in c]


def test_greedy_does_not_depend_on_batch_composition_or_left_padding(engine):
    alone = [engine.generate([r], seed=0)[0] for r in requests(GREEDY)]
    batched = engine.generate(requests(GREEDY), seed=123)
    reversed_batch = engine.generate(list(reversed(requests(GREEDY))), seed=7)[::-1]
    assert len({len(chat_prompt_ids(engine.tokenizer, m)) for m in PROMPTS}) > 3  # real left padding
    assert len({tuple(g.completion_ids) for g in alone}) == len(PROMPTS)  # outputs depend on the prompt
    for a, b, c in zip(alone, batched, reversed_batch, strict=True):
        assert a.completion_ids == b.completion_ids == c.completion_ids
        assert a.finish_reason == b.finish_reason == c.finish_reason


def test_seeded_request_samples_the_same_alone_or_in_any_batch(engine):
    """A request's own seed fixes its sample whatever shares the batch: other prompts (left padding, row
    compaction at different finishing steps), other seeds, unseeded rows, and the batch seed."""
    params = SamplingParams(temperature=1.0, max_tokens=12)
    seeded = [GenerationRequest(m, params, seed=100 + i) for i, m in enumerate(PROMPTS)]
    unseeded = requests(params)
    alone = [engine.generate([r], seed=0)[0].completion_ids for r in seeded]
    assert len({len(ids) for ids in alone}) > 2  # rows finish at different steps: batches get compacted
    batches = [
        (1, seeded),
        (2, seeded[::-1]),
        (3, unseeded[:3] + seeded[2:5] + unseeded[3:]),
        (4, [seeded[1]] + unseeded),
    ]
    for batch_seed, batch in batches:
        gens = engine.generate(batch, seed=batch_seed)
        for r, g in zip(batch, gens, strict=True):
            if r.seed is not None:
                assert g.completion_ids == alone[r.seed - 100], (batch_seed, r.seed)
    # the seed does matter: other seeds give other samples for the same prompt
    others = [engine.generate([GenerationRequest(PROMPTS[1], params, seed=s)], seed=0)[0] for s in range(8)]
    assert len({tuple(g.completion_ids) for g in others} | {tuple(alone[1])}) >= 4


def test_max_batch_chunks_and_mixed_sampling_groups_keep_request_order(engine):
    alone = [engine.generate([r], seed=0)[0] for r in requests(GREEDY)]
    small = type(engine)(engine.model, engine.tokenizer, max_batch=2)
    mixed = requests([GREEDY, SamplingParams(temperature=1.0, max_tokens=5)] * 3)
    gens = small.generate(mixed, seed=3)
    for i, (g, a) in enumerate(zip(gens, alone, strict=True)):
        assert g.prompt_ids == a.prompt_ids
        if i % 2 == 0:
            assert g.completion_ids == a.completion_ids
        else:
            assert len(g.completion_ids) <= 5
    assert small.tokens_generated == sum(len(g.completion_ids) for g in gens)


def test_engine_restores_training_mode(engine):
    engine.model.train()
    try:
        engine.generate(requests(GREEDY)[:2], seed=0)
        assert engine.model.training
    finally:
        engine.model.eval()


def test_sample_next_top_k_one_and_tiny_top_p_are_argmax():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 500, generator=gen)
    best = logits.argmax(-1)
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        assert torch.equal(sample_next(logits, SamplingParams(temperature=1.5, top_k=1), g), best)
        assert torch.equal(sample_next(logits, SamplingParams(temperature=1.5, top_p=1e-6), g), best)
    assert torch.equal(sample_next(logits, SamplingParams(temperature=0.0), gen), best)
    plain = sample_next(logits, SamplingParams(temperature=1.5), torch.Generator().manual_seed(0))
    assert not torch.equal(plain, best)  # without the filters, sampling does leave the argmax


def test_sample_next_top_k_and_top_p_restrict_the_support():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().repeat(4000, 1)
    gen = torch.Generator().manual_seed(0)
    top_p = sample_next(logits, SamplingParams(temperature=1.0, top_p=0.7), gen)
    assert set(top_p.tolist()) == {0, 1}  # smallest set with mass >= 0.7
    top_k = sample_next(logits, SamplingParams(temperature=1.0, top_k=3), gen)
    assert set(top_k.tolist()) == {0, 1, 2}
    free = sample_next(logits, SamplingParams(temperature=1.0), gen)
    assert set(free.tolist()) == {0, 1, 2, 3}
    share = (free == 0).float().mean().item()
    assert 0.46 < share < 0.54


def test_rows_with_their_own_generator_draw_the_right_distribution_independently_of_the_batch():
    probs = torch.tensor([0.5, 0.3, 0.0, 0.15, 0.05])
    logits = probs.log().repeat(4000, 1)
    params = SamplingParams(temperature=1.0)
    gens = [torch.Generator().manual_seed(i) for i in range(4000)]
    drawn = sample_next(logits, params, torch.Generator(), gens)
    assert 2 not in drawn.tolist()  # a zero-probability token is never drawn
    for token, p in enumerate(probs.tolist()):
        assert abs((drawn == token).float().mean().item() - p) < 0.025, token
    # a row's token depends on its own generator only, not on the rows batched with it
    alone = [
        sample_next(logits[:1], params, torch.Generator(), [torch.Generator().manual_seed(i)])
        for i in range(8)
    ]
    mixed = sample_next(
        logits[:8], params, torch.Generator(), [torch.Generator().manual_seed(i) for i in range(8)]
    )
    assert torch.cat(alone).tolist() == mixed.tolist()
    half = [torch.Generator().manual_seed(i) if i % 2 else None for i in range(8)]
    partly = sample_next(logits[:8], params, torch.Generator().manual_seed(99), half)
    assert partly[1::2].tolist() == mixed[1::2].tolist()


def test_greedy_matches_transformers_generate_with_a_shared_prefix(engine):
    """Shared-prefix prefill, middle padding and row compaction must not change a single token."""
    system = {
        "role": "system",
        "content": "You are a careful assistant. Solve the problem and answer briefly.",
    }
    prompts = [[system, m[-1]] for m in PROMPTS]
    ours = engine.generate(requests(GREEDY, prompts), seed=0)
    model, tok = engine.model, engine.tokenizer
    for g, messages in zip(ours, prompts, strict=True):
        ids = torch.tensor([chat_prompt_ids(tok, messages)])
        ref = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=GREEDY.max_tokens, do_sample=False,
            eos_token_id=sorted(engine.eos_ids), pad_token_id=engine.pad_id,
        )[0, ids.shape[1] :].tolist()  # fmt: skip
        if ref and ref[-1] == engine.pad_id and g.finish_reason == "eos":
            ref = ref[: len(g.completion_ids)]
        assert g.completion_ids == ref
