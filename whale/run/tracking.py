"""Optional experiment tracking to TensorBoard and Weights & Biases; off by default.

Scalars go out with the budget rollouts spent as their step, so curves of different methods line up
as they do in `whale compare`. Neither package is a dependency: enabling one that is not installed is a
one-line error when the run starts, never a crash halfway. W&B runs offline unless told otherwise.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from whale.core.config import ConfigError, TrackingConfig

PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


def check_tracking(cfg: TrackingConfig) -> None:
    for key, package in PACKAGES.items():
        if getattr(cfg, key) and importlib.util.find_spec(package) is None:
            raise ConfigError(
                f"tracking.{key}: the {package} package is not installed (pip install {package})"
            )


def metrics_from(record: dict[str, Any]) -> dict[str, float]:
    """The scalars worth plotting from one events.jsonl record or evaluation point."""
    kind = record.get("event")
    if kind == "weight_step":
        scalars = {"train/reward": record["train_reward"], "train/loss": record["loss"],
                   "train/kept_fraction": record["kept"] / max(record["total"], 1)}  # fmt: skip
        for key in ("kl", "margin", "mean_abs_advantage"):  # present for some algorithms only
            if record.get(key) is not None:
                scalars[f"train/{key}"] = record[key]
        return scalars
    if kind == "search_iteration":
        return {"search/incumbent_score": record["incumbent_score"],
                "search/accepted": float(record["accepted"])}  # fmt: skip
    if "val" in record and "test" in record:
        return {"eval/val_mean": record["val"]["mean"], "eval/test_mean": record["test"]["mean"],
                "eval/test_pass_at_k": record["test"]["pass_at_k"]}  # fmt: skip
    return {}


class Tracker:
    def __init__(self, cfg: TrackingConfig, out: Path, run_config: dict[str, Any]):
        check_tracking(cfg)
        self.tensorboard = self.wandb = None
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(log_dir=str(out / "tensorboard"))
        if cfg.wandb:
            import wandb

            self.wandb = wandb.init(
                project=cfg.wandb_project, dir=str(out), config=run_config, mode=cfg.wandb_mode,
                name=f"{run_config.get('name')}-{run_config['schedule']['method']}", resume="allow",
            )  # fmt: skip

    def log(self, record: dict[str, Any], step: int) -> None:
        metrics = metrics_from(record)
        if not metrics:
            return
        if self.tensorboard is not None:
            for name, value in metrics.items():
                self.tensorboard.add_scalar(name, value, step)
            self.tensorboard.flush()
        if self.wandb is not None:
            self.wandb.log({**metrics, "rollouts": step})

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()
