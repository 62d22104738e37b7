"""The paper's presets: they load and validate here (no GPU, no Qwen weights), hold the paper's settings,
and a missing model folder is a one-line error before anything slow starts."""

from __future__ import annotations

import pytest

from whale.core.config import load_config
from whale.model.loading import ModelLoadError
from whale.run.experiment import Experiment
from whale.run.schedule import weight_phase_steps

PAPER_STEPS = {"paper-searchqa": 44, "paper-math": 42, "paper-chess": 38}  # E = 0.6 epoch in the paper


@pytest.mark.parametrize("preset", sorted(PAPER_STEPS))
def test_a_paper_preset_loads_with_the_papers_settings(preset):
    cfg = load_config(preset)
    assert cfg.domain.name == preset.removeprefix("paper-")
    assert cfg.model.name == "models/Qwen3.5-4B" and cfg.engine.kind == "vllm"
    assert (cfg.rft.k, cfg.eval.k) == (8, 8)
    assert (cfg.sampling.temperature, cfg.sampling.top_p, cfg.sampling.top_k) == (1.0, 1.0, 20)
    assert (
        cfg.schedule.method == "whale"
        and cfg.schedule.weight_epochs == 0.6
        and cfg.schedule.search_iters == 6
    )
    assert (
        weight_phase_steps(cfg.schedule, cfg.domain.sizes["train"], cfg.rft.tasks_per_step)
        == PAPER_STEPS[preset]
    )
    assert cfg.domain.sizes["search"] == 256 and cfg.search.candidates_per_iter == 3
    assert cfg.search.rollouts_per_task == 1
    assert cfg.proposer.kind == "agent" and cfg.proposer.preset == "claude"
    assert cfg.weights.lora is False and cfg.weights.lr == (1e-6 if preset == "paper-searchqa" else 1e-7)


@pytest.mark.parametrize("preset", sorted(PAPER_STEPS))
def test_a_missing_model_folder_is_one_line_and_writes_nothing(tmp_path, preset):
    with pytest.raises(ModelLoadError) as caught:
        Experiment(load_config(preset), tmp_path / "run")
    message = str(caught.value)
    assert "\n" not in message and "'models/Qwen3.5-4B': no such folder" in message
    assert not (tmp_path / "run").exists()
