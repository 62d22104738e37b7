"""FastEngine's copy of the weights: each layer packed (q/k/v fused, gate/up fused, LoRA deltas merged in),
and a signature from torch's version counters that says when the copy is stale."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


class UnsupportedModel(ValueError):
    """The fast engine cannot run this architecture; use engine.kind=hf."""


@dataclass
class LayerWeights:
    qkv: torch.Tensor  # [(heads + 2 kv_heads) * head_dim, hidden]
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    gate_up: torch.Tensor  # [2 * intermediate, hidden]
    down: torch.Tensor
    ln_in: torch.Tensor
    ln_post: torch.Tensor
    q_norm: torch.Tensor | None  # Qwen3-style per-head norms
    k_norm: torch.Tensor | None


@dataclass
class PackedModel:
    embed: torch.Tensor
    layers: list[LayerWeights]
    norm: torch.Tensor
    lm_head: torch.Tensor
    eps: float
    heads: int
    kv_heads: int
    head_dim: int
    scale: float
    dtype: torch.dtype


def base_model(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def effective_linear(module: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) as the module computes them now: a peft LoRA layer's active deltas merged in."""
    if not hasattr(module, "base_layer"):
        return module.weight, module.bias
    weight, bias = module.base_layer.weight, module.base_layer.bias
    if not module.merged and not module.disable_adapters:
        for name in module.active_adapters:
            if name in module.lora_A:
                weight = weight + module.get_delta_weight(name)
    return weight, bias


class WeightWatch:
    """A signature that changes whenever a parameter is modified in place (optimizer step,
    load_state_dict) or adapters are merged or disabled, so the packed copy is known to be stale. The
    parameters and adapter layers are listed again only when the model or its weights label changes (a
    sync relabels); every step reads just their version counters and flags. Walking the modules each
    step cost 2 ms, a quarter of a tiny model's decode step."""

    def __init__(self) -> None:
        self.key: tuple[int, str] | None = None
        self.params: list[torch.Tensor] = []
        self.adapters: list[Any] = []

    def signature(self, model: Any, label: str) -> tuple:
        if self.key != (id(model), label):
            self.key = (id(model), label)
            self.params = list(model.parameters())
            self.adapters = [m for m in model.modules() if hasattr(m, "base_layer")]
        flags = tuple(
            (getattr(m, "merged", False), getattr(m, "disable_adapters", False)) for m in self.adapters
        )
        return (sum(p._version for p in self.params), len(self.params), flags)


@torch.no_grad()
def pack_weights(model: Any, dtype: torch.dtype) -> PackedModel:
    core = base_model(model)
    inner = getattr(core, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(core, "lm_head"):
        raise UnsupportedModel(f"{type(core).__name__}: not a Llama-style decoder (model.layers, lm_head)")
    packed = []
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        if not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")) or not all(
            hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")
        ):
            raise UnsupportedModel(f"{type(core).__name__}: unexpected attention or MLP layout")
        (q, qb), (k, kb), (v, vb) = (
            effective_linear(getattr(attn, n)) for n in ("q_proj", "k_proj", "v_proj")
        )
        bias = None if qb is None else torch.cat([qb, kb, vb]).to(dtype)
        (gate, _), (up, _) = effective_linear(mlp.gate_proj), effective_linear(mlp.up_proj)
        q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        packed.append(
            LayerWeights(
                qkv=torch.cat([q, k, v]).to(dtype).contiguous(),
                qkv_bias=bias,
                o=effective_linear(attn.o_proj)[0].to(dtype).contiguous(),
                gate_up=torch.cat([gate, up]).to(dtype).contiguous(),
                down=effective_linear(mlp.down_proj)[0].to(dtype).contiguous(),
                ln_in=layer.input_layernorm.weight.float().clone(),
                ln_post=layer.post_attention_layernorm.weight.float().clone(),
                q_norm=None if q_norm is None else q_norm.weight.float().clone(),
                k_norm=None if k_norm is None else k_norm.weight.float().clone(),
            )
        )
    cfg = core.config
    act = getattr(cfg, "hidden_act", "silu")
    if act != "silu":
        raise UnsupportedModel(f"{type(core).__name__}: activation {act!r} (the fast engine does silu)")
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return PackedModel(
        embed=inner.embed_tokens.weight.to(dtype).clone(),
        layers=packed,
        norm=inner.norm.weight.float().clone(),
        lm_head=effective_linear(core.lm_head)[0].to(dtype).contiguous(),
        eps=float(layers[0].input_layernorm.variance_epsilon),
        heads=cfg.num_attention_heads,
        kv_heads=cfg.num_key_value_heads,
        head_dim=head_dim,
        scale=float(getattr(layers[0].self_attn, "scaling", head_dim**-0.5)),
        dtype=dtype,
    )
