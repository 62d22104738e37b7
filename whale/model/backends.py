"""One place that turns `engine.kind` into an Engine, so runs, evals and benches pick backends alike."""

from __future__ import annotations

import importlib.util
from typing import Any

from whale.core.config import EngineConfig
from whale.model.engine import Engine


def vllm_installed() -> bool:
    """Whether `import vllm` would find a package (a blocked import, `sys.modules["vllm"] = None`, is no)."""
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def choose_kind(cfg: EngineConfig, model: Any) -> tuple[str, str]:
    """The backend `engine.kind` names, and why: "auto" takes vLLM where it is installed, imports and the
    model has a folder for it to load, otherwise whale's fast engine. vLLM is imported only when it would
    be chosen: the engine imports it next anyway, and a broken install then costs a fallback, not the run."""
    if cfg.kind != "auto":
        return cfg.kind, "engine.kind"
    if not vllm_installed():
        return "fast", "auto: vLLM is not installed"
    from whale.model.weight_sync import model_folder

    try:
        model_folder(model)
    except ValueError:
        return "fast", "auto: the model has no folder for vLLM to load"
    from whale.model.vllm_engine import quiet_logs

    quiet_logs()
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001  # an install broken any way (ImportError, OSError, RuntimeError)
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        return "fast", f"auto: vLLM is installed but does not import ({type(exc).__name__}: {first})"
    return "vllm", "auto: vLLM is installed"


def build_engine(cfg: EngineConfig, model: Any, tokenizer: Any, max_batch: int) -> Engine:
    """The engine serving `model`: in place (hf), or following it through weight files (vllm, remote)."""
    if cfg.kind == "auto":
        cfg = cfg.model_copy(update={"kind": choose_kind(cfg, model)[0]})
    if cfg.kind == "hf":
        from whale.model.hf_engine import HFEngine

        return HFEngine(model, tokenizer, max_batch=max_batch)
    if cfg.kind == "fast":
        from whale.core.config import ConfigError
        from whale.model.dtype_probe import pick_dtype
        from whale.model.fast_engine import FastEngine
        from whale.model.packed_weights import UnsupportedModel

        try:
            dtype, _ = pick_dtype(model, tokenizer, cfg.dtype)
            engine = FastEngine(
                model,
                tokenizer,
                max_batch=max_batch,
                dtype=dtype,
                prefix_cache_tokens=cfg.prefix_cache_tokens,
                kv_cache_gib=cfg.kv_cache_gib,
            )
        except UnsupportedModel as exc:
            raise ConfigError(f"engine.kind=fast: {exc}; use engine.kind=hf for this model") from None
        return engine
    if cfg.kind == "vllm":
        from whale.model.vllm_engine import VLLMEngine, with_cpu_dtype

        return VLLMEngine(model, tokenizer, with_cpu_dtype(cfg.vllm, model), max_batch)
    if cfg.kind == "remote":
        from whale.model.remote_engine import RemoteEngine

        return RemoteEngine(cfg.remote, model)
    raise ValueError(f"engine.kind: unknown backend {cfg.kind!r}")


def engine_dtype(engine: Engine) -> str:
    """What an engine computes in: vLLM's setting, the fast engine's packed weights, else its model's;
    "unknown" for a remote server or an engine without a model."""
    if hasattr(engine, "settings"):
        return str(engine.settings["dtype"])
    dtype, model = getattr(engine, "dtype", None), getattr(engine, "model", None)
    if dtype is None and model is not None:
        dtype = next(model.parameters()).dtype
    return str(dtype or "unknown").removeprefix("torch.")
