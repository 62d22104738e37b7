"""What vLLM and remote servers load after a weight step: a peft adapter folder (LoRA) or a safetensors state
dict (full), each reproducing the trainer's model exactly when loaded onto a fresh copy of the base; and
the temp folder they are written to goes with the process that made it."""

from __future__ import annotations

import gc
import tempfile

import pytest
import torch
from safetensors.torch import load_file

from whale.model.loading import load_model
from whale.model.trainer import Trainer, TrainerConfig, TrainExample
from whale.model.weight_sync import FULL_WEIGHTS_FILE, SyncFolders, lora_rank, model_folder, save_for_serving


def trained(make_tiny, tokenizer, lora: bool) -> Trainer:
    trainer = Trainer(
        make_tiny(0), tokenizer.eos_token_id, TrainerConfig(lora=lora, lora_r=4, lr=0.01), seed=0
    )
    ids = tokenizer.encode("The capital of France is Paris.")
    trainer.train([TrainExample(ids, [0] * 3 + [1] * (len(ids) - 3))])
    return trainer


def logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits


def test_a_lora_adapter_folder_reproduces_the_trained_model(tmp_path, make_tiny, tokenizer):
    from peft import PeftModel

    trainer = trained(make_tiny, tokenizer, lora=True)
    assert lora_rank(trainer.model) == 4
    assert save_for_serving(trainer.model, tmp_path / "a") == "lora"
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {
        p.name for p in (tmp_path / "a").iterdir()
    }
    served = PeftModel.from_pretrained(make_tiny(0), str(tmp_path / "a"))
    ids = tokenizer.encode("Name a fruit.")
    assert torch.equal(logits(served, ids), logits(trainer.model, ids))
    assert not torch.equal(logits(make_tiny(0), ids), logits(trainer.model, ids))


def test_full_weights_are_a_state_dict_that_reproduces_the_trained_model(tmp_path, make_tiny, tokenizer):
    trainer = trained(make_tiny, tokenizer, lora=False)
    assert lora_rank(trainer.model) is None
    assert save_for_serving(trainer.model, tmp_path / "f") == "full"
    state = load_file(str(tmp_path / "f" / FULL_WEIGHTS_FILE))
    assert "lm_head.weight" not in state  # tied to the embeddings: written once, re-tied on load
    fresh = make_tiny(0)
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    assert missing == ["lm_head.weight"] and unexpected == []
    ids = tokenizer.encode("Name a fruit.")
    assert torch.equal(logits(fresh, ids), logits(trainer.model, ids))


def test_merged_lora_weights_are_the_base_plus_the_adapter_and_leave_the_model_alone(
    tmp_path, make_tiny, tokenizer
):
    import copy

    trainer = trained(make_tiny, tokenizer, lora=True)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    assert save_for_serving(trainer.model, tmp_path / "m", merge=True) == "full"
    state = load_file(str(tmp_path / "m" / FULL_WEIGHTS_FILE))
    peft_merged = copy.deepcopy(trainer.model).merge_and_unload().state_dict()
    assert set(state) == set(peft_merged) - {"lm_head.weight"}  # the base's own names, tied head once
    assert all(torch.allclose(state[k], peft_merged[k], atol=1e-6) for k in state)
    changed = [k for k in state if not torch.equal(state[k], make_tiny(0).state_dict()[k])]
    assert changed and all(k.endswith("proj.weight") for k in changed)  # the LoRA targets, nothing else
    assert all(torch.equal(v, trainer.model.state_dict()[k]) for k, v in before.items())  # untouched
    fresh = make_tiny(0)
    fresh.load_state_dict(state, strict=False)
    ids = tokenizer.encode("Name a fruit.")
    assert torch.allclose(logits(fresh, ids), logits(trainer.model, ids), atol=1e-4)


def test_the_model_folder_is_where_the_base_came_from(tmp_path, make_tiny, tokenizer):
    with pytest.raises(ValueError, match="not loaded from a local folder"):
        model_folder(make_tiny(0))
    make_tiny(0).save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    model, _ = load_model(str(tmp_path / "m"))
    trainer = Trainer(model, tokenizer.eos_token_id, TrainerConfig(lora=True, lora_r=4))
    assert model_folder(trainer.model) == tmp_path / "m"  # through the peft wrapper too


def test_only_the_served_version_stays_on_disk(tmp_path):
    folders = SyncFolders(str(tmp_path))
    first = folders.next("w1")
    first[1].mkdir()
    folders.done(first[1])
    second = folders.next("w2")
    second[1].mkdir()
    assert (first[0], second[0]) == (1, 2) and first[1].exists()
    folders.done(second[1])
    assert [p.name for p in tmp_path.iterdir()] == ["00002-w2"]


def test_a_temp_folder_is_removed_on_close_and_when_dropped_and_a_given_root_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folders = SyncFolders(None)
    _, folder = folders.next("w1")
    folder.mkdir()
    assert folders.root.parent == tmp_path
    folders.close()
    assert not folders.root.exists()
    dropped = SyncFolders(None).root
    gc.collect()
    assert not dropped.exists()
    given = SyncFolders(str(tmp_path / "mine"))
    given.close()
    assert given.root.is_dir()
