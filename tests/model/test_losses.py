"""The weight losses (SFT, DPO, GRPO, KL) against hand-computed values, the trainer's reference weights, and
one real step of each on the tiny Llama moving the model the way the loss says."""

from __future__ import annotations

import math

import pytest
import torch

from whale.model.engine import GenerationRequest, SamplingParams
from whale.model.hf_engine import HFEngine
from whale.model.losses import Objective, dpo_loss, grpo_loss, kl_estimate, sft_loss
from whale.model.trainer import (
    Trainer,
    TrainerConfig,
    TrainExample,
    example_logprobs,
    micro_batch_loss,
    target_logprobs,
)

PROMPTS = ["What is 3 + 4?", "Name a fruit.", "hi", "Count to five, please, slowly and clearly."]


def pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def sharpened(model):
    """Larger random weights: peaked next-token distributions, so log-probs differ from token to token
    (the stock tiny model is near uniform, where any two computations agree trivially)."""
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 if "embed" in name else 0.3))
    return model.eval()


def generations(model, tokenizer, n: int = 4, temperature: float = 1.0, logprobs: bool = True, seed: int = 0):
    """n sampled completions of each prompt, with the engine's sampling log-probs."""
    engine = HFEngine(model, tokenizer)
    params = SamplingParams(temperature=temperature, max_tokens=8)
    reqs = [
        GenerationRequest(
            [{"role": "user", "content": q}], params, seed=seed * 100 + 10 * i + s, logprobs=logprobs
        )
        for i, q in enumerate(PROMPTS)
        for s in range(n)
    ]
    return engine.generate(reqs, seed=seed)


def example(g, **fields) -> TrainExample:
    return TrainExample(
        g.prompt_ids + g.completion_ids, [0] * len(g.prompt_ids) + [1] * len(g.completion_ids), **fields
    )


def manual_logprobs(model, e: TrainExample, temperature: float = 1.0) -> list[float]:
    """log p of each masked target, from the logits of an unbatched forward pass, one position at a time."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([e.ids])).logits[0].double() / temperature
    out = []
    for i in range(1, len(e.ids)):
        if e.mask[i]:
            row = logits[i - 1].tolist()
            top = max(row)
            out.append(row[e.ids[i]] - top - math.log(sum(math.exp(x - top) for x in row)))
    return out


# ---- pure losses against numbers worked out by hand --------------------------------------------------------


def test_sft_loss_is_the_summed_negative_log_likelihood():
    logps = [torch.tensor([math.log(0.5), math.log(0.25)]), torch.tensor([math.log(0.1)])]
    assert sft_loss(logps).item() == pytest.approx(math.log(2) + math.log(4) + math.log(10), rel=1e-6)


def test_dpo_loss_and_margin_by_hand():
    # chosen gained 1.0 nat over the reference, rejected lost 0.5: margin 1.5, beta 0.5 -> -log sigmoid(0.75)
    loss, margin = dpo_loss(
        torch.tensor([-3.0, -4.0]), torch.tensor([-5.0, -4.0]), torch.tensor([-4.0, -4.0]),
        torch.tensor([-4.5, -4.0]), beta=0.5,
    )  # fmt: skip
    assert loss[0].item() == pytest.approx(math.log(1 + math.exp(-0.75)), rel=1e-6)
    assert margin[0].item() == pytest.approx(0.75)
    assert loss[1].item() == pytest.approx(math.log(2), rel=1e-6)  # policy equals reference: log 2
    assert margin[1].item() == 0.0


def test_grpo_loss_clips_the_ratio_the_way_ppo_does():
    logps = torch.log(torch.tensor([0.5, 0.25, 0.2, 0.2]))
    old = torch.log(torch.tensor([0.4, 0.25, 0.4, 0.4]))  # ratios 1.25, 1.0, 0.5, 0.5
    advantage = torch.tensor([1.0, 1.0, 1.0, -1.0])
    got = grpo_loss(logps, old, advantage, clip_eps=0.2).tolist()
    # A > 0: min(1.25, 1.2) = 1.2 (clipped), 1.0, min(0.5, 0.8) = 0.5 (not clipped: the pessimistic side)
    # A < 0, ratio 0.5: min(-0.5, -0.8) = -0.8 (clipped)
    assert got == pytest.approx([-1.2, -1.0, -0.5, 0.8], rel=1e-6)
    # an advantage of 0 gives no loss and no gradient
    x = torch.tensor([math.log(0.3)], requires_grad=True)
    grpo_loss(x, torch.tensor([math.log(0.3)]), 0.0, 0.2).sum().backward()
    assert x.grad.item() == 0.0


def test_kl_estimate_by_hand_and_unbiased_over_the_policy():
    # d = log(0.25 / 0.5): exp(d) - d - 1 = 0.5 + log 2 - 1
    assert kl_estimate(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])).item() == pytest.approx(
        0.5 + math.log(2) - 1, rel=1e-6
    )
    p, q = [0.5, 0.3, 0.2], [0.2, 0.5, 0.3]
    per_token = kl_estimate(torch.log(torch.tensor(p)), torch.log(torch.tensor(q))).tolist()
    expectation = sum(pi * k for pi, k in zip(p, per_token, strict=True))
    assert expectation == pytest.approx(
        sum(pi * math.log(pi / qi) for pi, qi in zip(p, q, strict=True)), rel=1e-6
    )
    assert min(per_token) >= 0.0


def test_objective_needs_a_reference_only_for_dpo_and_kl_penalised_grpo():
    assert Objective("dpo").needs_reference and Objective("grpo", kl_coef=0.1).needs_reference
    assert not Objective("grpo").needs_reference and not Objective("sft", kl_coef=0.1).needs_reference


# ---- the trainer's micro-batch losses on a real model, against explicit log-softmax -----------------------


def test_micro_batch_losses_match_a_manual_computation_on_the_tiny_model(make_tiny, tokenizer):
    model = sharpened(make_tiny())
    gens = generations(model, tokenizer, n=2, temperature=0.7)
    a, b = gens[0], gens[1]  # two samples of one prompt
    pad = pad_id(tokenizer)

    sft = [example(a), example(b)]
    value, stats = micro_batch_loss(Objective("sft"), sft, example_logprobs(model, sft, pad))
    manual = [manual_logprobs(model, e) for e in sft]
    assert value.item() == pytest.approx(-sum(map(sum, manual)), rel=1e-5)
    assert stats["tokens"] == len(a.completion_ids) + len(b.completion_ids)

    # GRPO at the sampling temperature; old log-probs shifted so the ratio is not 1 everywhere
    old = [lp - 0.3 * (i % 2) for i, lp in enumerate(a.logprobs)]
    grpo = [example(a, temperature=0.7, advantage=0.8, old_logprobs=old)]
    value, _ = micro_batch_loss(Objective("grpo", clip_eps=0.2), grpo, example_logprobs(model, grpo, pad))
    new = manual_logprobs(model, grpo[0], temperature=0.7)
    expected = -sum(
        min(math.exp(n - o) * 0.8, min(max(math.exp(n - o), 0.8), 1.2) * 0.8)
        for n, o in zip(new, old, strict=True)
    )
    assert value.item() == pytest.approx(expected, rel=1e-4)

    # DPO: chosen a, rejected b, with reference log-probs 0.1 nat per token lower than the policy's for a
    ref_a = torch.tensor(manual_logprobs(model, example(a)), dtype=torch.float32) - 0.1
    ref_b = torch.tensor(manual_logprobs(model, example(b)), dtype=torch.float32)
    dpo = [
        example(a, pair=7, chosen=True, ref_logprobs=ref_a),
        example(b, pair=7, chosen=False, ref_logprobs=ref_b),
    ]
    value, stats = micro_batch_loss(Objective("dpo", beta=0.5), dpo, example_logprobs(model, dpo, pad))
    margin = 0.1 * len(a.completion_ids)
    assert value.item() == pytest.approx(math.log(1 + math.exp(-0.5 * margin)), rel=1e-4)
    assert stats["margin"] == pytest.approx(0.5 * margin, rel=1e-3)


def test_engine_logprobs_match_target_logprobs(make_tiny, tokenizer):
    """What GRPO's importance ratio divides by (engine, KV cache, left padding) equals what the trainer
    computes on the same sequences: same model, fp32."""
    model = sharpened(make_tiny())
    for temperature in (1.0, 0.6):
        gens = generations(model, tokenizer, n=2, temperature=temperature)
        batch = [example(g) for g in gens]
        with torch.no_grad():
            trained = target_logprobs(model, batch, pad_id(tokenizer), temperature)
        for g, lp in zip(gens, trained, strict=True):
            assert len(g.logprobs) == len(g.completion_ids) == len(lp)
            assert torch.allclose(torch.tensor(g.logprobs), lp, atol=1e-4), (g.logprobs, lp.tolist())
        spread = torch.cat(trained)
        assert spread.max() - spread.min() > 1.0  # not a near-uniform model: the check has teeth
    assert all(g.logprobs is None for g in generations(model, tokenizer, n=1, logprobs=False))


# ---- reference weights ------------------------------------------------------------------------------------


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_reference_is_the_frozen_weights_and_swapping_it_in_changes_nothing(
    tmp_path, make_tiny, tokenizer, lora
):
    model = make_tiny()
    batch = [example(g) for g in generations(sharpened(make_tiny()), tokenizer, n=1)]
    pad = pad_id(tokenizer)
    trainer = Trainer(model, pad, TrainerConfig(lora=lora, lr=5e-3, minibatch=4, micro_batch=2), seed=0)
    trainer.freeze_reference()
    with torch.no_grad():
        at_start = target_logprobs(trainer.model.eval(), batch, pad)
    trainer.save(tmp_path / "start")
    first, second = trainer.train(batch), trainer.train(batch)
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # measured before the update: still the reference
    assert second["kl"] > 1e-6  # the first step moved away from it
    after = trainer.trainable_state()
    refs = trainer.reference_logprobs(batch)
    assert all(torch.equal(after[k], v) for k, v in trainer.trainable_state().items())  # swapped back exactly
    for r, s in zip(refs, at_start, strict=True):
        assert torch.allclose(r, s, atol=1e-6)
    with torch.no_grad():
        now = target_logprobs(trainer.model, batch, pad)
    assert any(not torch.allclose(n, s, atol=1e-4) for n, s in zip(now, at_start, strict=True))
    trainer.freeze_reference()  # a new phase: the reference moves to the current weights
    assert all(
        torch.allclose(r, n, atol=1e-6) for r, n in zip(trainer.reference_logprobs(batch), now, strict=True)
    )
    trainer.load_reference(tmp_path / "start")  # a resumed run's reference comes from its checkpoint
    assert all(
        torch.allclose(r, s, atol=1e-6)
        for r, s in zip(trainer.reference_logprobs(batch), at_start, strict=True)
    )


# ---- one real step moves the model the way each loss says --------------------------------------------------


def sequence_logprob(model, examples, pad) -> list[float]:
    with torch.no_grad():
        return [lp.sum().item() for lp in target_logprobs(model.eval(), examples, pad)]


def test_dpo_steps_raise_the_chosen_over_rejected_margin(make_tiny, tokenizer):
    """Full fine-tuning here; LoRA runs DPO in the tiny whale runs (tests/weights/test_algorithms.py)."""
    model = make_tiny()
    gens = generations(sharpened(make_tiny()), tokenizer, n=2)
    pad = pad_id(tokenizer)
    examples = []
    for p in range(len(PROMPTS)):  # per prompt: the first sample chosen, the second rejected
        examples += [
            example(gens[2 * p], pair=p, chosen=True),
            example(gens[2 * p + 1], pair=p, chosen=False),
        ]
    trainer = Trainer(model, pad, TrainerConfig(lora=False, lr=2e-3, minibatch=4, micro_batch=1), seed=0)
    objective = Objective("dpo", beta=0.5)

    def margin() -> float:
        seq = sequence_logprob(trainer.model, examples, pad)
        return sum(seq[i] - seq[i + 1] for i in range(0, len(seq), 2)) / len(PROMPTS)

    before = margin()
    first = trainer.train(examples, loss=objective)
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-4)  # the policy starts as the reference
    assert first["optimizer_steps"] == 1 and first["margin"] == pytest.approx(0.0, abs=1e-4)
    for _ in range(3):
        last = trainer.train(examples, loss=objective)
    assert margin() > before + 0.5, (before, margin())
    assert last["margin"] > 0.0 and last["loss"] < math.log(2) and last["kl"] > 0.0


def test_grpo_steps_raise_the_probability_of_above_average_completions(make_tiny, tokenizer):
    sampler = sharpened(make_tiny())
    gens = generations(sampler, tokenizer, n=4, temperature=0.8)
    rewards = [1.0, 0.0, 1.0, 0.0] * len(PROMPTS)  # per prompt, samples 0 and 2 are "correct"
    advantages = [1.0 if r else -1.0 for r in rewards]  # group mean 0.5, std 0.5
    examples = [
        example(g, temperature=0.8, advantage=a, old_logprobs=g.logprobs)
        for g, a in zip(gens, advantages, strict=True)
    ]
    pad = pad_id(tokenizer)
    trainer = Trainer(sampler, pad, TrainerConfig(lora=True, lr=2e-3, minibatch=8, micro_batch=4), seed=0)
    before = sequence_logprob(trainer.model, examples, pad)
    objective = Objective("grpo", clip_eps=0.2, kl_coef=0.1)
    stats = [trainer.train(examples, loss=objective) for _ in range(2)]
    after = sequence_logprob(trainer.model, examples, pad)
    up = [a - b for a, b, adv in zip(after, before, advantages, strict=True) if adv > 0]
    down = [a - b for a, b, adv in zip(after, before, advantages, strict=True) if adv < 0]
    assert sum(up) / len(up) > 0.05 and sum(down) / len(down) < -0.05, (up, down)
    assert stats[0]["optimizer_steps"] == 2 and stats[0]["margin"] is None
    assert stats[0]["tokens"] == sum(len(g.completion_ids) for g in gens)
    assert stats[1]["kl"] > 0.0  # the KL penalty froze a reference: the weights at the first call
