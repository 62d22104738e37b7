"""The vLLM engine's pure parts: sampling parameters mapped one to one, vLLM's outputs turned into whale
Generations (objects shaped like vLLM's, with real tokenizer ids), the config path, and the one-line error
when vLLM is not installed. vLLM itself on the CPU: test_vllm_cpu.py; on a GPU: bench/device_vllm.py."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from whale.core.config import ConfigError, EngineConfig, VLLMConfig, load_config
from whale.model.backends import build_engine
from whale.model.engine import GenerationRequest, SamplingParams, request_seed
from whale.model.sampling import chat_prompt_ids
from whale.model.vllm_engine import (
    MISSING,
    engine_kwargs,
    finish_reason,
    generation_from_output,
    import_vllm,
    lora_slot_rank,
    merges_lora,
    quiet_logs,
    vllm_sampling_kwargs,
)
from whale.run.experiment import Experiment

# Field names of vllm.SamplingParams (vllm/sampling_params.py) that whale sets.
VLLM_FIELDS = {
    "n", "temperature", "top_p", "top_k", "max_tokens", "stop", "seed", "logprobs",
    "include_stop_str_in_output", "skip_special_tokens", "output_kind",
}  # fmt: skip


# Shaped like vllm.outputs.RequestOutput / CompletionOutput and vllm.logprobs.Logprob.
@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = True


def test_sampling_parameters_map_one_to_one():
    params = SamplingParams(temperature=1.0, top_p=0.9, top_k=20, max_tokens=33, stop=("\n\n", "END"))
    kwargs = vllm_sampling_kwargs(params, seed=1234, logprobs=True)
    assert set(kwargs) <= VLLM_FIELDS
    assert kwargs == {
        "n": 1, "temperature": 1.0, "top_p": 0.9, "top_k": 20, "max_tokens": 33, "stop": ["\n\n", "END"],
        "seed": 1234, "logprobs": 0, "include_stop_str_in_output": False, "skip_special_tokens": True,
        "output_kind": 2,  # FINAL_ONLY: a stepped request is reported once, when it is done
    }  # fmt: skip
    plain = vllm_sampling_kwargs(SamplingParams(temperature=0.7, top_k=0), seed=5, logprobs=False)
    assert plain["top_k"] == -1  # whale's 0 (disabled) is vLLM's -1
    assert plain["logprobs"] is None and plain["stop"] == [] and plain["temperature"] == 0.7
    assert vllm_sampling_kwargs(SamplingParams(temperature=0.0), seed=5, logprobs=True)["temperature"] == 0.0


def test_logprobs_at_a_temperature_vllm_cannot_report_are_refused():
    """vLLM's raw log-probabilities are at temperature 1; whale's are at the request's temperature."""
    with pytest.raises(ValueError, match="temperature 1, not at the request's 0.7"):
        vllm_sampling_kwargs(SamplingParams(temperature=0.7), seed=0, logprobs=True)
    for t in (1.0, 0.0):  # equal meanings: T=1, and greedy (whale counts T <= 0 as 1)
        assert vllm_sampling_kwargs(SamplingParams(temperature=t), seed=0, logprobs=True)["logprobs"] == 0


def test_every_request_gets_a_seed_of_its_own():
    own = GenerationRequest([{"role": "user", "content": "x"}], seed=77)
    none = GenerationRequest([{"role": "user", "content": "x"}])
    assert request_seed(own, 1, 0) == 77
    derived = {request_seed(none, batch, i) for batch in (1, 2) for i in range(3)}
    assert len(derived) == 6 and all(0 <= s < 2**63 for s in derived)
    assert request_seed(none, 1, 2) == request_seed(none, 1, 2)


def completion(tokenizer: Any, text: str, eos: bool, **kw: Any) -> tuple[list[int], CompletionOutput]:
    ids = tokenizer.encode(text, add_special_tokens=False) + ([tokenizer.eos_token_id] if eos else [])
    logprobs = [{t: Logprob(-0.25 * (i + 1), 1)} for i, t in enumerate(ids)]
    return ids, CompletionOutput(0, text, ids, -0.25 * len(ids) * (len(ids) + 1) / 2, logprobs, **kw)


def test_vllm_outputs_become_generations_with_exact_ids(tokenizer):
    messages = [{"role": "user", "content": "Capital of France?"}]
    prompt = chat_prompt_ids(tokenizer, messages)
    ids, out = completion(
        tokenizer, "Paris is the capital.", eos=True, finish_reason="stop", stop_reason=None
    )
    g = generation_from_output(prompt, RequestOutput("0", None, prompt, [out]), want_logprobs=True)
    assert g.prompt_ids == prompt and g.completion_ids == ids and ids[-1] == tokenizer.eos_token_id
    assert g.text == "Paris is the capital." and g.finish_reason == "eos"
    assert g.logprobs == [-0.25 * (i + 1) for i in range(len(ids))]
    ids, out = completion(tokenizer, "Paris", eos=False, finish_reason="stop", stop_reason=" is")
    g = generation_from_output(prompt, RequestOutput("1", None, prompt, [out]), want_logprobs=False)
    assert g.finish_reason == "stop" and g.logprobs is None and g.completion_ids == ids
    _, out = completion(tokenizer, "Paris is", eos=False, finish_reason="length")
    assert (
        generation_from_output(prompt, RequestOutput("2", None, prompt, [out]), False).finish_reason
        == "length"
    )
    out.logprobs = None
    with pytest.raises(RuntimeError, match="no log-probability"):
        generation_from_output(prompt, RequestOutput("3", None, prompt, [out]), want_logprobs=True)
    assert finish_reason("stop", 2) == "eos"  # a stop token id ends the sequence like EOS
    with pytest.raises(RuntimeError, match="'abort'"):
        finish_reason("abort", None)


def test_lora_slots_fit_the_adapter_rank():
    assert [lora_slot_rank(r) for r in (1, 8, 9, 16, 64, 200)] == [8, 8, 16, 16, 64, 256]
    with pytest.raises(ValueError, match="above vLLM's largest"):
        lora_slot_rank(1024)


def test_a_merged_lora_model_gets_no_lora_slots():
    """On the CPU a LoRA model is served merged unless asked otherwise, and vLLM then gets no LoRA
    slots (they slow every layer); an adapter, the GPU's default, gets slots of its rank."""
    assert [merges_lora(VLLMConfig(), cpu) for cpu in (True, False)] == [True, False]
    assert merges_lora(VLLMConfig(lora_serving="adapter"), cpu=True) is False
    assert merges_lora(VLLMConfig(lora_serving="merged"), cpu=False) is True
    assert "enable_lora" not in engine_kwargs(VLLMConfig(), "m", 8, None, cpu=True)
    slots = engine_kwargs(VLLMConfig(), "m", 8, 16, cpu=False)
    assert (slots["enable_lora"], slots["max_lora_rank"]) == (True, 16)


def test_on_the_cpu_the_context_is_capped_at_what_the_model_allows(tmp_path):
    """vLLM refuses a max_model_len above the model's positions (the tiny model has 2048)."""
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 2048}')
    assert engine_kwargs(VLLMConfig(), str(tmp_path), 8, None, cpu=True)["max_model_len"] == 2048
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 32768}')
    assert engine_kwargs(VLLMConfig(), str(tmp_path), 8, None, cpu=True)["max_model_len"] == 8192
    asked = engine_kwargs(VLLMConfig(max_model_len=4096), str(tmp_path), 8, None, cpu=True)
    assert asked["max_model_len"] == 4096 and asked["max_num_batched_tokens"] == 8192


def test_vllm_keeps_its_warnings_only_unless_the_user_sets_its_log_level(monkeypatch):
    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    quiet_logs()
    assert os.environ["VLLM_LOGGING_LEVEL"] == "WARNING"
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    quiet_logs()
    assert os.environ["VLLM_LOGGING_LEVEL"] == "DEBUG"


def test_the_config_selects_vllm_and_validates_its_settings():
    cfg = load_config("tiny", overrides=["engine.kind=vllm", "engine.vllm.gpu_memory_utilization=0.8"])
    assert cfg.engine.kind == "vllm" and cfg.engine.vllm.gpu_memory_utilization == 0.8
    with pytest.raises(ConfigError, match="engine.vllm.gpu_memory_utilization"):
        load_config("tiny", overrides=["engine.vllm.gpu_memory_utilization=1.5"])
    with pytest.raises(ConfigError, match="unknown key 'engine.vllm.tp'"):
        load_config("tiny", overrides=["engine.vllm.tp=2"])


def test_without_vllm_the_engine_is_a_one_line_error(tmp_path, tiny, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # as on a machine where vLLM has no wheels
    with pytest.raises(ImportError) as caught:
        import_vllm()
    assert str(caught.value) == MISSING and "whale[gpu]" in MISSING and "\n" not in MISSING
    with pytest.raises(ImportError, match="whale\\[gpu\\]"):
        build_engine(EngineConfig(kind="vllm"), tiny[0], tiny[1], 8)
    with pytest.raises(ConfigError, match="whale\\[gpu\\]"):
        Experiment(
            load_config("tiny", overrides=["engine.kind=vllm", "model.name=embedded"]), tmp_path / "run"
        )
    with pytest.raises(ConfigError, match="model.name=tiny has none"):  # vLLM loads weights from a folder
        Experiment(load_config("tiny", overrides=["engine.kind=vllm"]), tmp_path / "run")
    assert not (tmp_path / "run").exists()
