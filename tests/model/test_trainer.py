"""Trainer on the real tiny Llama: SFT lowers NLL (LoRA and full), loss masks, exact save/load."""

from __future__ import annotations

import math

import pytest
import torch

from whale.harness.records import ModelCall, Rollout
from whale.model.engine import GenerationRequest, SamplingParams
from whale.model.hf_engine import HFEngine
from whale.model.trainer import Trainer, TrainerConfig, TrainExample, micro_batches, token_nll
from whale.weights.examples import call_examples


@torch.no_grad()
def mean_nll(trainer: Trainer, examples: list) -> float:
    """Mean per-token negative log-likelihood of the examples' targets under the trainer's model."""
    trainer.model.eval()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=trainer.config.dtype == "bfloat16"):
        nll, count = token_nll(trainer.model, examples, trainer.pad_id)
    return nll.item() / max(count, 1)


QUESTIONS = ["What is 3 + 4?", "Name a fruit.", "hi", "Count to five, please, slowly and clearly."]


def recorded_rollouts(model, tokenizer, seed: int = 0) -> list[Rollout]:
    """Rollouts whose model calls are real sampled generations from `model`."""
    engine = HFEngine(model, tokenizer)
    msgs = [[{"role": "user", "content": q}] for q in QUESTIONS]
    gens = engine.generate([GenerationRequest(m, SamplingParams(max_tokens=10)) for m in msgs], seed=seed)
    rollouts = []
    for i, (m, g) in enumerate(zip(msgs, gens, strict=True)):
        call = ModelCall(m, g.prompt_ids, g.completion_ids, g.text, g.finish_reason, True, {})
        rollouts.append(Rollout(f"t{i}", "h", "w0", 0, calls=[call]))
    return rollouts


@pytest.fixture
def examples(make_tiny, tokenizer) -> list[TrainExample]:
    ex = [e for r in recorded_rollouts(make_tiny(), tokenizer) for e in call_examples(r)]
    assert len(ex) == len(QUESTIONS)
    return ex


def pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def test_examples_mask_exactly_the_completion(make_tiny, tokenizer):
    rollouts = recorded_rollouts(make_tiny(), tokenizer)
    rollouts[0].calls.append(ModelCall([], [1, 2], [3], "x", "length", False, {}))  # train=False: skipped
    ex = [e for r in rollouts for e in call_examples(r)]
    assert len(ex) == len(QUESTIONS)
    for e, r in zip(ex, rollouts, strict=True):
        c = r.calls[0]
        assert e.ids == c.prompt_ids + c.completion_ids
        assert e.mask == [0] * len(c.prompt_ids) + [1] * len(c.completion_ids)


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_sft_steps_raise_likelihood_of_the_examples(make_tiny, tokenizer, examples, lora):
    model = make_tiny()
    cfg = TrainerConfig(lora=lora, lr=2e-3 if lora else 1e-3, minibatch=4, micro_batch=2)
    trainer = Trainer(model, pad_id(tokenizer), cfg, seed=0)
    n_trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    n_total = sum(p.numel() for p in trainer.model.parameters())
    if lora:
        assert 0 < n_trainable < n_total / 4
    else:
        assert n_trainable == n_total
    before = mean_nll(trainer, examples)
    stats = [trainer.train(examples) for _ in range(3)]
    after = mean_nll(trainer, examples)
    assert math.isfinite(before) and before > 5.0  # near log(vocab) for a random model
    assert after < before - 0.05, (before, after)
    assert all(s["optimizer_steps"] == 1 for s in stats)
    assert stats[0]["tokens"] == sum(sum(e.mask[1:]) for e in examples)
    assert stats[0]["loss"] == pytest.approx(before, rel=1e-3)  # first minibatch sees the untrained model
    assert trainer.steps == 3
    assert not trainer.model.training
    ticks = []
    small = Trainer(make_tiny(), pad_id(tokenizer), TrainerConfig(lora=lora, minibatch=1, epochs=2), seed=0)
    done = small.train(examples, on_step=lambda: ticks.append(1))
    assert len(ticks) == done["optimizer_steps"] == 2 * len(examples)
    assert small.optimizer_steps_for(len(examples)) == 2 * len(examples)


def test_token_nll_matches_a_manual_computation(make_tiny, tokenizer, examples):
    model = make_tiny().eval()
    ex = examples[1]
    with torch.no_grad():
        nll, count = token_nll(model, [ex], pad_id(tokenizer))
        logp = model(input_ids=torch.tensor([ex.ids])).logits[0].float().log_softmax(-1)
    manual = -sum(logp[i - 1, ex.ids[i]].item() for i in range(1, len(ex.ids)) if ex.mask[i])
    assert count == sum(ex.mask[1:])
    assert nll.item() == pytest.approx(manual, rel=1e-5)


def test_masked_tokens_do_not_contribute_to_the_loss(make_tiny, tokenizer, examples):
    model = make_tiny().eval()
    pad = pad_id(tokenizer)
    ex = examples[0]
    n_prompt = ex.mask.index(1)
    with torch.no_grad():
        base, n = token_nll(model, [ex], pad)
        # appended targets with mask 0: their values do not matter
        tail_a = TrainExample(ex.ids + [11, 12, 13], ex.mask + [0, 0, 0])
        tail_b = TrainExample(ex.ids + [900, 901, 902], ex.mask + [0, 0, 0])
        a, na = token_nll(model, [tail_a], pad)
        b, nb = token_nll(model, [tail_b], pad)
        # the mask is what excludes the prompt: unmasking it changes the loss
        unmasked, nu = token_nll(model, [TrainExample(ex.ids, [1] * len(ex.ids))], pad)
        # right padding next to a longer example does not change a row's loss
        longer = TrainExample(ex.ids + list(range(100, 140)), ex.mask + [1] * 40)
        pair, npair = token_nll(model, [ex, longer], pad)
        alone_longer, nlonger = token_nll(model, [longer], pad)
    assert n == na == nb == sum(ex.mask[1:])
    assert a.item() == pytest.approx(base.item(), rel=1e-5)
    assert b.item() == pytest.approx(base.item(), rel=1e-5)
    assert nu == len(ex.ids) - 1 and nu > n
    assert unmasked.item() > base.item() + 1.0
    assert npair == n + nlonger
    assert pair.item() == pytest.approx(base.item() + alone_longer.item(), rel=1e-4)
    assert n_prompt > 5


def test_micro_batches_cap_units_and_padded_tokens_and_never_split_a_unit():
    def unit(*lengths: int) -> list[TrainExample]:
        return [TrainExample([0] * n, [1] * n) for n in lengths]

    units = [unit(10), unit(10), unit(20), unit(30, 30), unit(200), unit(5)]
    sizes = [[len(e.ids) for e in batch] for batch in micro_batches(units, max_units=16, max_tokens=60)]
    # 3 x 20 = 60 fits; the pair would make 5 x 30; 200 is over the cap alone; 2 x 200 would be over it
    assert sizes == [[10, 10, 20], [30, 30], [200], [5]]
    assert [len(b) for b in micro_batches(units[:3], max_units=2, max_tokens=10**6)] == [2, 1]
    assert [len(b) for b in micro_batches(units, 16, 10**6)] == [7]  # no token cap: one pass
    assert micro_batches([], 4, 100) == []


def test_how_a_minibatch_is_cut_into_passes_does_not_change_the_update(make_tiny, tokenizer, examples):
    """Gradient accumulation is exact: one pass per example and one pass for all give the same weights."""
    states = []
    for tokens in (1, 10**6):  # every example alone; all four in one pass
        cfg = TrainerConfig(lora=False, lr=1e-3, minibatch=4, micro_batch=4, micro_batch_tokens=tokens)
        trainer = Trainer(make_tiny(), pad_id(tokenizer), cfg, seed=0)
        stats = trainer.train(examples)
        states.append((trainer.trainable_state(), stats["loss"]))
    (one, loss_one), (all_, loss_all) = states
    assert loss_one == pytest.approx(loss_all, rel=1e-5)
    assert all(torch.allclose(one[k], all_[k], atol=1e-6) for k in one)
    assert any(not torch.equal(one[k], make_tiny().state_dict()[k]) for k in one)  # it did train


def test_all_masked_examples_take_no_step_and_leave_weights_alone(make_tiny, tokenizer, examples):
    trainer = Trainer(make_tiny(), pad_id(tokenizer), TrainerConfig(lora=False), seed=0)
    before = trainer.trainable_state()
    stats = trainer.train([TrainExample(e.ids, [0] * len(e.ids)) for e in examples])
    assert stats["optimizer_steps"] == 0 and stats["tokens"] == 0
    after = trainer.trainable_state()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert trainer.train([])["optimizer_steps"] == 0


def test_trainable_tensors_are_live_views_and_trainable_state_a_copy(make_tiny, tokenizer, examples):
    trainer = Trainer(make_tiny(), pad_id(tokenizer), TrainerConfig(lora=False, lr=2e-3), seed=0)
    live, copy = trainer.trainable_tensors(), trainer.trainable_state()
    assert set(live) == set(copy) and all(torch.equal(live[k], copy[k]) for k in live)
    params = {n: p for n, p in trainer.model.named_parameters()}
    assert all(live[k].data_ptr() == params[k].data_ptr() for k in live)  # no 540 MB copy for a digest
    trainer.train(examples)
    assert any(not torch.equal(live[k], copy[k]) for k in live)  # the views moved with the step, the copy not
    assert all(torch.equal(live[k], v) for k, v in trainer.trainable_state().items())


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_save_load_restores_trainable_weights_exactly(tmp_path, make_tiny, tokenizer, examples, lora):
    cfg = TrainerConfig(lora=lora, lr=2e-3, minibatch=8, micro_batch=8)
    first = Trainer(make_tiny(), pad_id(tokenizer), cfg, seed=0)
    first.train(examples)
    first.train(examples)
    first.save(tmp_path / "ckpt")
    saved = first.trainable_state()

    fresh = Trainer(make_tiny(), pad_id(tokenizer), cfg, seed=0)
    fresh_state = fresh.trainable_state()
    assert set(fresh_state) == set(saved)
    assert any(not torch.equal(fresh_state[k], saved[k]) for k in saved)  # training did change them
    fresh.load(tmp_path / "ckpt")
    loaded = fresh.trainable_state()
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)
    assert fresh.steps == first.steps == 2
    assert mean_nll(fresh, examples) == pytest.approx(mean_nll(first, examples), rel=1e-6)
    # the optimizer state came back too: one more identical step stays in lockstep
    first.train(examples)
    fresh.train(examples)
    a, b = first.trainable_state(), fresh.trainable_state()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_load_refuses_a_checkpoint_that_lacks_trainable_tensors(tmp_path, make_tiny, tokenizer):
    lora = Trainer(make_tiny(), pad_id(tokenizer), TrainerConfig(lora=True), seed=0)
    lora.save(tmp_path / "lora")
    full = Trainer(make_tiny(), pad_id(tokenizer), TrainerConfig(lora=False), seed=0)
    with pytest.raises(ValueError, match="lacks"):
        full.load(tmp_path / "lora")


def test_target_logprobs_equal_the_full_logits_at_target_positions(make_tiny, tokenizer, examples):
    """The LM head runs on target positions only; the numbers are those of the full forward."""
    from whale.model.trainer import target_logprobs

    model = make_tiny()
    trainer = Trainer(model, pad_id(tokenizer), TrainerConfig(lora=True), seed=0)
    batch = examples[:3]
    with torch.no_grad():
        ours = target_logprobs(trainer.model, batch, pad_id(tokenizer), temperature=0.8)
        for e, lp in zip(batch, ours, strict=True):
            logits = trainer.model(input_ids=torch.tensor([e.ids])).logits[0, :-1] / 0.8
            full = torch.log_softmax(logits, -1).gather(-1, torch.tensor(e.ids[1:])[:, None]).squeeze(-1)
            keep = torch.tensor(e.mask[1:], dtype=torch.bool)
            assert len(lp) == int(keep.sum()) > 0
            assert torch.allclose(lp, full[keep], atol=1e-5)


def test_bf16_autocast_training_tracks_fp32(make_tiny, tokenizer, examples):
    losses = {}
    for dtype in ("float32", "bfloat16"):
        cfg = TrainerConfig(lora=True, lr=2e-3, minibatch=4, micro_batch=2, dtype=dtype)
        trainer = Trainer(make_tiny(), pad_id(tokenizer), cfg, seed=0)
        losses[dtype] = [trainer.train(examples)["loss"] for _ in range(4)] + [mean_nll(trainer, examples)]
    fp32, bf16 = losses["float32"], losses["bfloat16"]
    assert fp32[-1] < fp32[0] - 0.05 and bf16[-1] < bf16[0] - 0.05  # both learn
    for a, b in zip(fp32, bf16, strict=True):
        assert b == pytest.approx(a, rel=0.01), (fp32, bf16)
