"""FSDP training in two real rank processes (gloo, CPU) against the one-process Trainer on the tiny model:
same losses, same updated weights, interchangeable checkpoints."""

from __future__ import annotations

import random

import pytest
import torch

from whale.core.config import load_config
from whale.model.distributed import DistributedTrainer, build_trainer
from whale.model.trainer import Trainer, TrainExample

pytestmark = pytest.mark.slow


def examples(vocab: int, n: int = 7) -> list[TrainExample]:
    """Sequences of different lengths, the loss on a suffix of each (as on a completion)."""
    rng = random.Random(0)
    out = []
    for _ in range(n):
        length = rng.randint(6, 30)
        prompt = rng.randint(2, length - 2)
        out.append(
            TrainExample(
                [rng.randrange(vocab) for _ in range(length)], [0] * prompt + [1] * (length - prompt)
            )
        )
    return out


def assert_same_weights(a: Trainer, b: Trainer, atol: float) -> None:
    sa, sb = a.trainable_state(), b.trainable_state()
    assert sa.keys() == sb.keys() and sa
    for name in sa:
        torch.testing.assert_close(sa[name], sb[name], rtol=0, atol=atol, msg=name)


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_fsdp_on_two_ranks_trains_as_one_process(lora, tokenizer, tmp_path):
    # minibatch 3, micro-batch 1: the last minibatch of 7 examples leaves rank 1 without a micro-batch,
    # so it runs an all-masked pass to keep FSDP's collectives in step.
    sets = [f"weights.lora={lora}", "weights.minibatch=3", "weights.micro_batch=1",
            f"weights.lr={1e-2 if lora else 1e-3}"]  # fmt: skip
    torch.manual_seed(0)
    single, _ = build_trainer(load_config("tiny", None, sets))
    torch.manual_seed(0)  # the same LoRA initialisation for both
    fsdp, _ = build_trainer(
        load_config("tiny", None, [*sets, "weights.parallel=fsdp", "weights.backend=gloo"])
    )
    ranks = list(fsdp.procs)
    try:
        assert isinstance(fsdp, DistributedTrainer) and len(ranks) == 2 and all(p.is_alive() for p in ranks)
        assert_same_weights(single, fsdp, atol=0)
        data = examples(len(tokenizer))
        before = single.trainable_state()
        for _ in range(2):
            a, b = single.train(data), fsdp.train(data)
            assert a["optimizer_steps"] == b["optimizer_steps"] == 3
            assert a["tokens"] == b["tokens"]
            assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
            assert_same_weights(single, fsdp, atol=1e-5)
        moved = max((single.trainable_state()[n] - before[n]).abs().max().item() for n in before)
        assert moved > 100 * 1e-5  # the steps changed the weights far beyond the tolerance

        # A checkpoint of the FSDP trainer is a Trainer checkpoint (and back): same files, same optimizer.
        fsdp.save(tmp_path / "fsdp")
        single.save(tmp_path / "single")
        saved = torch.load(tmp_path / "fsdp" / "optimizer.pt", weights_only=True)["optimizer"]
        expected = single.optimizer.state_dict()
        assert saved["state"].keys() == expected["state"].keys()
        for i, state in expected["state"].items():
            for key, value in state.items():
                torch.testing.assert_close(saved["state"][i][key], value, rtol=1e-4, atol=1e-7)
        fsdp.load(tmp_path / "single")
        assert_same_weights(single, fsdp, atol=0)
        a, b = single.train(data), fsdp.train(data)
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert_same_weights(single, fsdp, atol=1e-5)
    finally:
        fsdp.close()
    assert not any(p.is_alive() for p in ranks)
