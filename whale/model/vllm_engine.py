"""vLLM on local GPUs, behind whale's Engine protocol (optional extra `whale[gpu]`).

Prompts go in as token ids built from the tokenizer's chat template (the ids the HF engine would build),
so the ids recorded for training are exactly the ones vLLM saw and sampled; text is never re-tokenized.
One `generate` call hands the whole batch to vLLM, whose scheduler batches it continuously on the GPU.

Weights follow the trainer without restarting vLLM. When `weights_version` changes (after a weight step,
or on resume), the next `generate` first writes the trainer's weights (whale.model.weight_sync):
- LoRA: the adapter folder, served through a new `LoRARequest` with a new integer id (hot swap);
- full fine-tuning: a safetensors state dict that every vLLM worker loads in place through
  `collective_rpc("whale_load_weights")` (a worker extension, below), then the prefix cache is reset,
  since cached keys and values were computed by the old weights.

Sampling maps one to one (see `vllm_sampling_kwargs`). Log-probabilities: vLLM's default
`logprobs_mode="raw_logprobs"` returns log_softmax of the raw logits, i.e. at temperature 1 and before
top-k/top-p; whale's `Generation.logprobs` is log_softmax(logits / T) before top-k/top-p. The two agree
exactly for T = 1 (the paper's setting) and for greedy decoding (T <= 0 counts as 1 in whale); for any
other temperature vLLM has no mode that equals whale's (its "processed_logprobs" also applies top-k/top-p),
so such a request is refused rather than recorded with the wrong meaning.
"""

from __future__ import annotations

from typing import Any

from whale.core.config import VLLMConfig
from whale.model.engine import Generation, GenerationRequest, SamplingParams, request_seed
from whale.model.sampling import chat_prompt_ids
from whale.model.weight_sync import FULL_WEIGHTS_FILE, SyncFolders, lora_rank, model_folder, save_for_serving

MISSING = "engine.kind=vllm: vLLM is not installed (pip install 'whale[gpu]', on a machine with a CUDA GPU)"
# vLLM allocates LoRA slots of these ranks; an adapter of rank r needs a slot of rank >= r.
LORA_SLOT_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


def import_vllm() -> Any:
    """The vllm module, or a one-line ImportError naming the extra that provides it."""
    try:
        import vllm
    except ImportError:
        raise ImportError(MISSING) from None
    return vllm


def vllm_sampling_kwargs(params: SamplingParams, seed: int, logprobs: bool) -> dict[str, Any]:
    """Keyword arguments for `vllm.SamplingParams` meaning exactly what whale's `params` mean.

    top_k 0 (disabled in whale) is vLLM's -1 (accepted as "disabled" by every vLLM release); stop strings
    are cut from the text but their tokens stay in the ids, as in the HF engine; logprobs=0 asks for the
    sampled token's log-probability only. Special tokens are skipped in the text, as the HF engine does.
    """
    if logprobs and params.temperature > 0 and params.temperature != 1.0:
        raise ValueError(
            f"vLLM returns log-probabilities at temperature 1, not at the request's {params.temperature:g}; "
            "use sampling.temperature 1.0 (or greedy) when log-probabilities are needed"
        )
    return {
        "n": 1,
        "temperature": max(params.temperature, 0.0),
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else -1,
        "max_tokens": params.max_tokens,
        "stop": list(params.stop),
        "seed": seed,
        "logprobs": 0 if logprobs else None,
        "include_stop_str_in_output": False,
        "skip_special_tokens": True,
    }


def finish_reason(reason: str | None, stop_reason: int | str | None) -> str:
    """whale's finish reason from vLLM's: "stop" with a string stop_reason is a stop string; "stop" with
    none (or a stop token id) is end of sequence; "length" is max_tokens."""
    if reason == "length":
        return "length"
    if reason == "stop":
        return "stop" if isinstance(stop_reason, str) else "eos"
    raise RuntimeError(f"vLLM ended a request with finish_reason {reason!r}")


def generation_from_output(prompt_ids: list[int], output: Any, want_logprobs: bool) -> Generation:
    """One whale Generation from a vLLM RequestOutput (its first and only completion)."""
    completion = output.outputs[0]
    ids = [int(t) for t in completion.token_ids]
    logprobs = None
    if want_logprobs:
        if completion.logprobs is None or len(completion.logprobs) != len(ids):
            raise RuntimeError("vLLM returned no log-probability for some sampled tokens")
        logprobs = [float(step[tok].logprob) for step, tok in zip(completion.logprobs, ids, strict=True)]
    reason = finish_reason(completion.finish_reason, completion.stop_reason)
    return Generation(completion.text, list(prompt_ids), ids, reason, logprobs)


def lora_slot_rank(rank: int) -> int:
    for slot in LORA_SLOT_RANKS:
        if slot >= rank:
            return slot
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest ({LORA_SLOT_RANKS[-1]})")


class WeightLoader:
    """vLLM worker extension (`worker_extension_cls`): methods run inside every GPU worker."""

    def whale_load_weights(self, path: str) -> None:
        from safetensors.torch import load_file

        self.model_runner.model.load_weights(weights=load_file(path).items())  # type: ignore[attr-defined]


class VLLMEngine:
    """whale's Engine over `vllm.LLM`, following the trainer's model (see the module docstring)."""

    def __init__(
        self, model: Any, tokenizer: Any, cfg: VLLMConfig, max_batch: int, weights_version: str = "w0"
    ):
        vllm = import_vllm()
        self.vllm = vllm
        self.model = model
        self.tokenizer = tokenizer
        self.rank = lora_rank(model)
        folder = model_folder(model)
        kwargs: dict[str, Any] = {
            "model": str(folder),
            "tokenizer": str(folder),
            "dtype": cfg.dtype,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "tensor_parallel_size": cfg.tensor_parallel_size,
            "max_num_seqs": max_batch,
            "enforce_eager": cfg.enforce_eager,
            "worker_extension_cls": f"{__name__}.WeightLoader",
        }
        if cfg.max_model_len is not None:
            kwargs["max_model_len"] = cfg.max_model_len
        if self.rank is not None:
            kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=lora_slot_rank(self.rank))
        self.llm = vllm.LLM(**kwargs)
        self.folders = SyncFolders(cfg.sync_dir)
        self.lora: Any = None  # the LoRARequest now served; None: the base weights
        self.weights_version = weights_version  # set by the experiment after each weight step
        self._served = weights_version  # the version vLLM holds now
        self.tokens_generated = 0

    def sync_weights(self) -> None:
        """Hand the trainer's current weights to vLLM (a no-op when it already serves them)."""
        if self._served == self.weights_version:
            return
        serial, folder = self.folders.next(self.weights_version)
        kind = save_for_serving(self.model, folder)
        if kind == "lora":
            from vllm.lora.request import LoRARequest

            self.lora = LoRARequest(f"whale-{self.weights_version}", serial, str(folder))
        else:
            self.llm.collective_rpc("whale_load_weights", args=(str(folder / FULL_WEIGHTS_FILE),))
            self.llm.reset_prefix_cache()
        self.folders.done(folder)
        self._served = self.weights_version

    def generate(self, requests: list[GenerationRequest], seed: int) -> list[Generation]:
        self.sync_weights()
        prompts = [chat_prompt_ids(self.tokenizer, r.messages) for r in requests]
        params = [
            self.vllm.SamplingParams(**vllm_sampling_kwargs(r.params, request_seed(r, seed, i), r.logprobs))
            for i, r in enumerate(requests)
        ]
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for ids in prompts], params, lora_request=self.lora, use_tqdm=False
        )
        out = [
            generation_from_output(ids, o, r.logprobs)
            for ids, o, r in zip(prompts, outputs, requests, strict=True)
        ]
        self.tokens_generated += sum(len(g.completion_ids) for g in out)
        return out
