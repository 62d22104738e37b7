"""New weights leave the trainer as files an inference server can load.

The HF engine serves the trainer's model object itself; vLLM and remote servers hold their own copy, so
after each weight step the trainable part is written to a folder: a peft adapter folder under LoRA (what
vLLM's LoRARequest and its `/v1/load_lora_adapter` endpoint read), a safetensors state dict with HF
parameter names under full fine-tuning (what vLLM's `model.load_weights` takes). One folder per weights
version; the previous one is deleted once the next is in place.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whale.core.temp_folders import OwnedTempFolder

FULL_WEIGHTS_FILE = "model.safetensors"


def lora_rank(model: Any) -> int | None:
    """The LoRA rank of a peft-wrapped model, or None when the model is trained in full."""
    config = getattr(model, "peft_config", None)
    if not config:
        return None
    return int(next(iter(config.values())).r)


def model_folder(model: Any) -> Path:
    """The local folder the (base) model was loaded from: what a server loads before any update."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    path = Path(str(getattr(base, "name_or_path", "") or ""))
    if not str(path) or str(path) == "." or not (path / "config.json").is_file():
        raise ValueError(
            f"the model was not loaded from a local folder ({str(path) or 'no path'!r}); "
            "vLLM and remote servers load the same weights from a folder: set model.name to one"
        )
    return path


def save_for_serving(model: Any, folder: Path, merge: bool = False) -> str:
    """Write the servable weights into `folder` (created here); returns "lora" or "full". With `merge`, a
    LoRA model is written as full weights with its adapter added in (`merged_state`)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    if lora_rank(model) is not None and not merge:
        model.save_pretrained(str(folder))  # adapter_config.json + adapter_model.safetensors
        return "lora"
    state = merged_state(model) if lora_rank(model) is not None else model.state_dict()
    state = {name: t.detach().contiguous().cpu() for name, t in state.items()}
    shared = _tied_duplicates(state)
    save_file({k: v for k, v in state.items() if k not in shared}, str(folder / FULL_WEIGHTS_FILE))
    return "full"


def merged_state(model: Any) -> dict[str, Any]:
    """The base model's state dict, under its own names, with each LoRA layer's delta added to its
    weight; the model itself is left as it is (peft's merge and unmerge in place would drift it). For a
    server that serves full weights faster than an adapter (vLLM on the CPU)."""
    import torch

    base = model.get_base_model()
    deltas: dict[str, Any] = {}
    with torch.no_grad():
        for name, module in base.named_modules():
            if hasattr(module, "get_delta_weight") and not getattr(module, "disable_adapters", False):
                for adapter in module.active_adapters:
                    delta = module.get_delta_weight(adapter)
                    key = f"{name}.weight"
                    deltas[key] = delta if key not in deltas else deltas[key] + delta
        state = {}
        for key, tensor in base.state_dict().items():
            if "lora_" in key:
                continue
            key = key.replace(".base_layer.", ".")
            state[key] = tensor + deltas[key].to(tensor.dtype) if key in deltas else tensor
    return state


def _tied_duplicates(state: dict[str, Any]) -> set[str]:
    """Names whose tensor shares storage with an earlier name (tied embeddings): safetensors refuses
    aliased tensors, and servers re-tie them on load."""
    seen: dict[tuple[int, int], str] = {}
    out = set()
    for name, t in state.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        if key in seen:
            out.add(name)
        else:
            seen[key] = name
    return out


TEMP_PREFIX = "whale-weights-"


class SyncFolders:
    """Numbered folders for successive weight versions under `root`. Without a root, a temp folder of this
    process (half a gigabyte for the embedded model; see whale.core.temp_folders for when it goes)."""

    def __init__(self, root: str | None):
        self.close: Callable[[], Any] = lambda: None  # removes the temp folder; a given root is kept
        if root:
            self.root = Path(root)
            self.root.mkdir(parents=True, exist_ok=True)
        else:
            self._temp = OwnedTempFolder(TEMP_PREFIX)
            self.root, self.close = self._temp.path, self._temp.close
        self.count = 0
        self.current: Path | None = None

    def next(self, version: str) -> tuple[int, Path]:
        """A fresh folder for `version` and its serial number (1, 2, ...: vLLM's LoRA ids)."""
        self.count += 1
        folder = self.root / f"{self.count:05d}-{version}"
        shutil.rmtree(folder, ignore_errors=True)
        return self.count, folder

    def done(self, folder: Path) -> None:
        """`folder` is now served: the previous version's files are no longer needed."""
        if self.current is not None and self.current != folder:
            shutil.rmtree(self.current, ignore_errors=True)
        self.current = folder
