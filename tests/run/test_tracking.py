"""Optional tracking: one-line error when a backend is missing; TensorBoard scalars from a real tiny run."""

from __future__ import annotations

import pytest

from tests.cli.test_cli import assert_user_error, whale
from whale.core.config import ConfigError, TrackingConfig
from whale.core.files import read_jsonl
from whale.run import tracking


def test_missing_backend_is_a_one_line_config_error(monkeypatch):
    monkeypatch.setitem(tracking.PACKAGES, "wandb", "whale_no_such_package")
    tracking.check_tracking(TrackingConfig())  # off: nothing is imported or checked
    with pytest.raises(
        ConfigError, match=r"tracking.wandb: the whale_no_such_package package is not installed"
    ):
        tracking.check_tracking(TrackingConfig(wandb=True))


def test_metrics_from_events_and_eval_points():
    step = {"event": "weight_step", "train_reward": 0.25, "loss": 1.5, "kept": 4, "total": 16}
    assert tracking.metrics_from(step) == {
        "train/reward": 0.25,
        "train/loss": 1.5,
        "train/kept_fraction": 0.25,
    }
    grpo = {**step, "kl": 0.01, "margin": None, "mean_abs_advantage": 0.7}
    assert tracking.metrics_from(grpo) == {
        **tracking.metrics_from(step),
        "train/kl": 0.01,
        "train/mean_abs_advantage": 0.7,
    }
    search = {"event": "search_iteration", "incumbent_score": 0.5, "accepted": True}
    assert tracking.metrics_from(search) == {"search/incumbent_score": 0.5, "search/accepted": 1.0}
    point = {"point": 1, "val": {"mean": 0.1}, "test": {"mean": 0.2, "pass_at_k": 0.3}}
    assert tracking.metrics_from(point) == {
        "eval/val_mean": 0.1,
        "eval/test_mean": 0.2,
        "eval/test_pass_at_k": 0.3,
    }
    assert tracking.metrics_from({"event": "phase_switch"}) == {}


@pytest.mark.slow
def test_tensorboard_receives_the_runs_scalars_at_rollouts_spent(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    proc = whale("run", "--preset", "tiny", "--out", str(out), "--set", "tracking.tensorboard=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    tests = [(s.step, s.value) for s in events.Scalars("eval/test_mean")]
    assert tests == [
        (p["rollouts"], pytest.approx(p["test"]["mean"])) for p in read_jsonl(out / "evals.jsonl")
    ]
    steps = [e for e in read_jsonl(out / "events.jsonl") if e["event"] == "weight_step"]
    assert [s.step for s in events.Scalars("train/reward")] == [e["rollouts"] for e in steps]
    assert_user_error(
        whale(
            "run", "--preset", "tiny", "--set", "tracking.wandb=true", "--set", "tracking.wandb_mode=cloud"
        ),
        "tracking.wandb_mode",
    )
