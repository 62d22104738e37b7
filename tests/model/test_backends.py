"""`engine.kind`: "auto" takes vLLM where it is installed and the model has a folder, else the fast engine;
the driver resolves it once and says which, with dtype and threads."""

from __future__ import annotations

import platform
import sys

import pytest

from whale.core.config import Config, EngineConfig
from whale.model.backends import build_engine, choose_kind, vllm_installed
from whale.model.fast_engine import FastEngine
from whale.model.loading import load_model
from whale.model.trainer import Trainer, TrainerConfig
from whale.run.preflight import resolve_engine

VLLM_PLATFORM = sys.platform == "linux" and platform.machine() == "x86_64"  # where `make install` adds it


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", 0)


def test_a_named_kind_is_taken_as_configured(tiny):
    for kind in ("hf", "fast", "vllm", "remote"):
        assert choose_kind(EngineConfig(kind=kind), tiny[0]) == (kind, "engine.kind")


@pytest.mark.skipif(not VLLM_PLATFORM, reason="vLLM's CPU wheel is installed on Linux x86_64 only")
def test_auto_takes_vllm_where_it_is_installed_and_the_model_has_a_folder():
    model, _ = load_model("embedded", 0)
    assert vllm_installed()
    assert choose_kind(EngineConfig(kind="auto"), model) == ("vllm", "auto: vLLM is installed")


def test_auto_takes_the_fast_engine_when_vllm_cannot_be_imported(monkeypatch, tiny):
    monkeypatch.setitem(sys.modules, "vllm", None)  # how Python blocks an import: `import vllm` fails
    assert not vllm_installed()
    assert choose_kind(EngineConfig(kind="auto"), tiny[0]) == ("fast", "auto: vLLM is not installed")


def test_auto_serves_a_model_without_a_folder_on_the_fast_engine(tiny):
    model, tokenizer = tiny
    if not vllm_installed():
        pytest.skip("vLLM is not installed here, so the folder is never looked at")
    cfg = EngineConfig(kind="auto")
    assert choose_kind(cfg, model) == ("fast", "auto: the model has no folder for vLLM to load")
    assert isinstance(build_engine(cfg, model, tokenizer, 8), FastEngine)


def trainer_of(model, dtype: str) -> Trainer:
    return Trainer(model, 0, TrainerConfig(lora=False, dtype=dtype))


def test_the_driver_records_the_chosen_backend_dtype_threads_and_why(monkeypatch, tiny):
    monkeypatch.setitem(sys.modules, "vllm", None)
    cfg = Config.model_validate({"model": {"name": "tiny"}, "engine": {"kind": "auto", "dtype": "float32"}})
    resolved, said = resolve_engine(cfg, trainer_of(tiny[0], "float32"), tiny[1])
    assert resolved.engine.kind == "fast"
    assert said.startswith("fast float32 (float32 requested, ") and said.endswith(
        " torch threads); auto: vLLM is not installed"
    )
    assert resolved.runner.lockstep is False and resolved.weights.dtype == "float32"


def test_the_driver_decides_auto_dtypes_once_and_bfloat16_runs_in_lockstep(monkeypatch, tiny):
    """The record a resume keeps: both engines' dtypes as decided (whichever engine a resume picks), the
    trainer's, and lockstep on in bfloat16, whose draws repeat only in fixed batches."""
    monkeypatch.setitem(sys.modules, "vllm", None)
    cfg = Config.model_validate({"model": {"name": "tiny"}})  # every dtype "auto", lockstep undecided
    assert (cfg.engine.dtype, cfg.engine.vllm.dtype, cfg.weights.dtype, cfg.runner.lockstep) == (
        "auto", "auto", "auto", None)  # fmt: skip
    resolved, said = resolve_engine(cfg, trainer_of(tiny[0], "float32"), tiny[1])
    dtype = resolved.engine.dtype
    assert dtype in ("float32", "bfloat16") and resolved.engine.vllm.dtype == dtype
    assert said.startswith(f"fast {dtype} (auto: ")  # with the measurement behind it
    assert resolved.runner.lockstep == (dtype == "bfloat16")
    bf16 = cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"dtype": "bfloat16"})})
    resolved, said = resolve_engine(bf16, trainer_of(tiny[0], "bfloat16"), tiny[1])
    assert resolved.runner.lockstep is True and "; lockstep (bfloat16" in said
    assert resolved.weights.dtype == "bfloat16" and resolved.engine.vllm.dtype == "bfloat16"
    off = bf16.model_copy(update={"runner": bf16.runner.model_copy(update={"lockstep": False})})
    assert resolve_engine(off, trainer_of(tiny[0], "float32"), tiny[1])[0].runner.lockstep is False


def test_vllms_engine_core_runs_in_whales_process_exactly_when_the_run_is_in_lockstep(tiny):
    """In its own process vLLM's core runs on between the runner's calls, so a request joins whichever
    step it reaches and lockstep cannot fix the batches; "auto" puts the core inline then. Decided
    without building an engine (both dtypes given, so nothing is measured)."""
    for dtype, lockstep, core in (("bfloat16", None, "inline"), ("float32", None, "process"),
                                  ("bfloat16", False, "process"), ("float32", True, "inline")):  # fmt: skip
        cfg = Config.model_validate({
            "model": {"name": "tiny"}, "runner": {"lockstep": lockstep},
            "engine": {"kind": "vllm", "dtype": dtype, "vllm": {"dtype": dtype}},
        })  # fmt: skip
        resolved, said = resolve_engine(cfg, trainer_of(tiny[0], "float32"), tiny[1])
        assert resolved.engine.vllm.engine_core == core and resolved.runner.lockstep == (core == "inline")
        assert ("engine core in whale's process" in said) == (core == "inline")
    asked = Config.model_validate(
        {"engine": {"kind": "vllm", "vllm": {"engine_core": "process", "dtype": "bfloat16"}}}
    )
    resolved, _ = resolve_engine(asked, trainer_of(tiny[0], "float32"), tiny[1])
    assert resolved.engine.vllm.engine_core == "process" and resolved.runner.lockstep is True


def test_auto_falls_back_to_the_fast_engine_when_vllm_is_installed_but_does_not_import(
    tmp_path, monkeypatch, tiny
):
    model, _ = tiny
    model.save_pretrained(tmp_path / "model")  # a folder vLLM could load
    monkeypatch.setattr(model, "name_or_path", str(tmp_path / "model"))
    broken = tmp_path / "site" / "vllm"  # an install whose import fails, as a mismatched torchvision did
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    kind, why = choose_kind(EngineConfig(kind="auto"), model)
    assert kind == "fast"
    assert why == (
        "auto: vLLM is installed but does not import (RuntimeError: operator torchvision::nms does not exist)"
    )
