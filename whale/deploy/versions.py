"""The agent versions of a run: every evaluation point is a (weights, harness) pair with its scores.

A version id is `<weights version>-<harness id>`, e.g. `w3-c0001`: weights after 3 RFT steps running
candidate c0001. Two points with the same weights and harness are one agent (the later point's scores
are its scores). The weights are in the checkpoint folder the evaluation record names (none: the base
model). Retention (`checkpoints.keep_every`) may have deleted it; such a version is still listed, with
the reason it cannot be exported.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whale.core.config import ConfigError
from whale.run.rundir import RunDir
from whale.run.summary import best_val_point


@dataclass
class AgentVersion:
    id: str
    point: int
    label: str
    phase: str
    weights: str
    harness: str
    checkpoint: str | None  # folder under checkpoints/ holding the weights; None: the base model
    rollouts: int  # budget rollouts spent when it was evaluated
    val: dict[str, Any]  # SplitScore of whale.core.stats as a dict
    test: dict[str, Any]
    missing: str = ""  # why it cannot be exported ("" when it can)


def _version(run: Path, p: dict[str, Any]) -> AgentVersion:
    checkpoint = p.get("checkpoint")
    missing = ""
    if "checkpoint" not in p and p["weights"] != "w0":
        missing = "the run predates agent versions (its evaluation records name no checkpoint)"
    elif checkpoint and not (RunDir(run).checkpoint(checkpoint) / "weights.safetensors").is_file():
        missing = f"checkpoint {checkpoint} is no longer on disk (checkpoints.keep_every thins them)"
    elif not RunDir(run).harness_file(p["harness"]).is_file():
        missing = f"harness {p['harness']} is missing from {run / 'search'}"
    return AgentVersion(
        f"{p['weights']}-{p['harness']}", p["point"], p["label"], p["phase"], p["weights"], p["harness"],
        checkpoint, p["rollouts"], p["val"], p["test"], missing,
    )  # fmt: skip


def agent_versions(run: Path) -> list[AgentVersion]:
    """One version per evaluation point, in order."""
    if not RunDir(run).is_run():
        raise ConfigError(f"{run}: not a whale run (no state.json)")
    return [_version(run, p) for p in RunDir(run).points()]


def best_version(versions: list[AgentVersion]) -> AgentVersion:
    """The version of the best point by validation mean@k (earliest on a tie; test is never used)."""
    point = best_val_point([{"point": v.point, "val": v.val} for v in versions])["point"]
    return next(v for v in versions if v.point == point)


def select_version(run: Path, version: str | None = None, best: str | None = None) -> AgentVersion:
    """`--version ID` (the latest point with that id) or `--best val` (the default), exportable."""
    if version and best:
        raise ConfigError("give --version or --best, not both")
    if best not in (None, "val"):
        raise ConfigError(f"--best {best}: only 'val' (checkpoint selection never uses test)")
    versions = agent_versions(run)
    if not versions:
        raise ConfigError(f"{run}: no evaluation points yet, so no agent versions")
    if version:
        matching = [v for v in versions if v.id == version]
        if not matching:
            known = ", ".join(dict.fromkeys(v.id for v in versions))
            raise ConfigError(f"--version {version}: not an agent version of {run} (versions: {known})")
        chosen = matching[-1]
    else:
        chosen = best_version(versions)
    if chosen.missing:
        raise ConfigError(
            f"{run}: agent {chosen.id} (point {chosen.point}) cannot be exported: {chosen.missing}"
        )
    return chosen
