"""`whale diff A B`: what differs between two agent bundles, for an A/B decision.

Harness: a unified diff. Weights: the norm of B - A per tensor (merged weights, so a LoRA bundle and a
merged one compare alike), in total and for the tensors that moved most. Scores: B - A on val or test
per task, from the rewards each bundle recorded at export, with a paired bootstrap CI over the tasks
both were scored on; "significant" when the 95% interval excludes 0.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whale.core.files import read_json
from whale.core.stats import PairedDifference, paired_difference
from whale.deploy.bundle import BundleError, load_bundle_model, verify_bundle

SPLITS = ("val", "test")


@dataclass
class TensorDelta:
    name: str
    norm: float  # ||B - A||
    relative: float  # ||B - A|| / ||A|| (inf when A is all zeros)


@dataclass
class ScoreDelta:
    split: str
    mean_a: float
    mean_b: float
    paired: PairedDifference  # B - A over the common tasks
    significant: bool


@dataclass
class BundleDiff:
    a: dict[str, Any]  # manifests
    b: dict[str, Any]
    harness_diff: str  # "" when the harness files are identical
    weights_total: float  # ||B - A|| over every tensor
    weights_relative: float
    tensors: list[TensorDelta]  # every tensor, largest change first
    scores: ScoreDelta | None
    scores_note: str  # why there are no paired scores ("" when there are)


def merged_weights(folder: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Name -> tensor of the bundle's model with any adapter merged in (tied tensors once)."""
    model, _ = load_bundle_model(folder, manifest)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    return {name: p.detach() for name, p in model.named_parameters()}


def weight_deltas(a: dict[str, Any], b: dict[str, Any]) -> list[TensorDelta]:
    if set(a) != set(b) or any(a[n].shape != b[n].shape for n in a):
        differing = sorted(set(a) ^ set(b)) or [n for n in sorted(a) if a[n].shape != b[n].shape]
        raise BundleError(f"the bundles' models differ in architecture (e.g. tensor {differing[0]})")
    deltas = []
    for name in a:
        norm, base = float((b[name] - a[name]).norm()), float(a[name].norm())
        deltas.append(TensorDelta(name, norm, norm / base if base else math.inf))
    return sorted(deltas, key=lambda d: -d.norm)


def score_delta(a: Path, b: Path, ma: dict[str, Any], mb: dict[str, Any], split: str) -> ScoreDelta | str:
    """Paired B - A on `split`, or the reason it cannot be paired."""
    if ma["domain"] != mb["domain"]:
        return "not paired: the bundles come from different domain settings, so their tasks differ"
    ra, rb = read_json(a / "scores.json")[split], read_json(b / "scores.json")[split]
    common = sorted(set(ra) & set(rb))
    if not common:
        return f"not paired: no {split} task was scored in both bundles"
    per_a = [sum(ra[t]) / len(ra[t]) for t in common]
    per_b = [sum(rb[t]) / len(rb[t]) for t in common]
    paired = paired_difference(per_b, per_a)
    significant = paired.ci_low > 0 or paired.ci_high < 0
    return ScoreDelta(split, sum(per_a) / len(common), sum(per_b) / len(common), paired, significant)


def diff_bundles(a: Path, b: Path, split: str = "test") -> BundleDiff:
    if split not in SPLITS:
        raise BundleError(f"--split {split}: bundles record {' and '.join(SPLITS)} scores")
    ma, mb = verify_bundle(a), verify_bundle(b)
    text = "".join(
        difflib.unified_diff(
            (a / "harness.py").read_text().splitlines(True),
            (b / "harness.py").read_text().splitlines(True),
            f"A/{ma['harness']}/harness.py",
            f"B/{mb['harness']}/harness.py",
        )  # fmt: skip
    )
    wa, wb = merged_weights(a, ma), merged_weights(b, mb)
    tensors = weight_deltas(wa, wb)
    total = math.sqrt(sum(d.norm**2 for d in tensors))
    base = math.sqrt(sum(float(t.norm()) ** 2 for t in wa.values()))
    scores = score_delta(a, b, ma, mb, split)
    if isinstance(scores, str):
        return BundleDiff(ma, mb, text, total, total / base, tensors, None, scores)
    return BundleDiff(ma, mb, text, total, total / base, tensors, scores, "")
