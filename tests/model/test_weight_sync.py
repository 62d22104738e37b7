"""What vLLM and remote servers load after a weight step: a peft adapter folder (LoRA) or a safetensors state
dict (full), each reproducing the trainer's model exactly when loaded onto a fresh copy of the base; and
the temp folder they are written to goes with the process that made it."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

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


MAKE_FOLDERS = (
    "from whale.model.weight_sync import SyncFolders\nfolders = SyncFolders(None)\nprint(folders.root)\n"
)
KILL_SELF = "import os, sys\nprint(os.getpid())\nsys.stdout.flush()\nos.kill(os.getpid(), 9)\n"


def in_process(script: str, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp)}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture
def temp_root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_temp_folder_is_removed_on_close_and_when_dropped_and_a_given_root_is_kept(temp_root):
    folders = SyncFolders(None)
    _, folder = folders.next("w1")
    folder.mkdir()
    assert folders.root.parent == temp_root
    folders.close()
    assert not folders.root.exists()
    dropped = SyncFolders(None).root
    gc.collect()
    assert not dropped.exists()
    given = SyncFolders(str(temp_root / "mine"))
    given.close()
    assert given.root.is_dir()


def test_a_process_removes_its_temp_folder_at_exit_but_not_a_forked_child(temp_root):
    script = MAKE_FOLDERS + (
        "import os, sys\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    sys.exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print(folders.root.is_dir())\n"
    )
    done = in_process(script, temp_root)
    root, after_child = done.stdout.split()
    assert done.returncode == 0, done.stderr
    assert after_child == "True" and not Path(root).exists()


def test_a_killed_process_leaves_its_folder_and_the_next_one_removes_it(temp_root):
    killed = in_process(MAKE_FOLDERS + KILL_SELF, temp_root)
    orphan, dead_pid = Path(killed.stdout.split()[0]), killed.stdout.split()[1]
    assert killed.returncode == -9 and orphan.is_dir()
    (temp_root / "whale-weights-foreign").mkdir()
    (temp_root / "whale-weights-foreign" / "owner").write_text(f"another-host {dead_pid}")
    (temp_root / "whale-weights-old").mkdir()  # no owner file: not whale's to judge
    live = SyncFolders(None)
    (temp_root / "whale-weights-live").mkdir()
    (temp_root / "whale-weights-live" / "owner").write_text(f"{socket.gethostname()} {os.getpid()}")
    SyncFolders(None)
    assert not orphan.exists()
    assert live.root.is_dir() and (temp_root / "whale-weights-live").is_dir()
    assert (temp_root / "whale-weights-foreign").is_dir() and (temp_root / "whale-weights-old").is_dir()
