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


def test_the_driver_records_the_chosen_backend_dtype_threads_and_why(monkeypatch, tiny):
    monkeypatch.setitem(sys.modules, "vllm", None)
    cfg = Config.model_validate({"model": {"name": "tiny"}, "engine": {"kind": "auto"}})
    resolved, said = resolve_engine(cfg, *tiny)
    assert resolved.engine.kind == "fast"
    assert said.startswith("fast float32 (float32 requested, ") and said.endswith(
        " torch threads); auto: vLLM is not installed"
    )


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
