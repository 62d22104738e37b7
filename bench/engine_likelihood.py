"""Do two engines sample from the same distribution? Score each engine's rollouts under transformers.

    whale eval --harness H --preset default --k 16 --set engine.kind=fast --rows fast.jsonl
    whale eval --harness H --preset default --k 16 --set engine.kind=vllm --rows vllm.jsonl
    python bench/engine_likelihood.py fast.jsonl vllm.jsonl [--every 4] [--temperature 0.7]

Per file: mean reward, finish reasons, and the mean log-probability per completion token under the
embedded model's own transformers forward pass at the sampling temperature. A sampler or forward pass
that drifts from transformers shows as less likely completions. Then the paired per-task reward
difference of the second file minus the first, on all samples and on each half of the sample indices
(the first draws repeat in every run of the same seed; the rest are fresh).
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path
from typing import Any

import torch

from whale.core.stats import bootstrap_ci, task_means
from whale.model.loading import load_model


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mean_logprob(model: Any, rows: list[dict[str, Any]], temperature: float) -> tuple[float, int]:
    """Mean log p per completion token of every first call, and the count of tokens below log p -9."""
    total, tokens, rare = 0.0, 0, 0
    for row in rows:
        call = row["calls"][0]
        ids = torch.tensor([call["prompt_ids"] + call["completion_ids"]])
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        start = len(call["prompt_ids"])
        sampled = torch.tensor(call["completion_ids"])[:, None]
        logp = torch.log_softmax(logits[start - 1 : -1] / temperature, -1).gather(-1, sampled).squeeze(-1)
        total, tokens, rare = total + logp.sum().item(), tokens + len(logp), rare + int((logp < -9).sum())
    return total / max(tokens, 1), rare


def per_task(rows: list[dict[str, Any]], samples: range) -> dict[str, float]:
    return task_means((r["task_id"], float(r["reward"])) for r in rows if r["sample"] in samples)


def paired(first: dict[str, float], second: dict[str, float]) -> tuple[float, float, float]:
    """Second minus first over tasks, with the 95% task-bootstrap interval whale reports everywhere."""
    diff = [second[t] - first[t] for t in sorted(first)]
    return sum(diff) / len(diff), *bootstrap_ci(diff, n_boot=20000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs=2, type=Path)
    parser.add_argument("--every", type=int, default=4, help="score every Nth rollout's likelihood")
    parser.add_argument("--temperature", type=float, default=0.7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, _ = load_model("embedded")
    model.eval()
    files = [read_rows(path) for path in args.rows]
    for path, rows in zip(args.rows, files, strict=True):
        reasons = collections.Counter(c["finish_reason"] for r in rows for c in r["calls"])
        logp, rare = mean_logprob(model, rows[:: args.every], args.temperature)
        mean = sum(r["reward"] for r in rows) / len(rows)
        print(
            f"{path}: {len(rows)} rollouts, mean {mean:.3f}, finish {dict(reasons)}, "
            f"log p/token {logp:.4f}, tokens below -9: {rare}"
        )
    k = 1 + max(r["sample"] for r in files[0])
    for label, samples in (
        ("all", range(k)),
        ("first half", range(k // 2)),
        ("second half", range(k // 2, k)),
    ):
        diff, low, high = paired(per_task(files[0], samples), per_task(files[1], samples))
        pair = f"{args.rows[1].name} - {args.rows[0].name}"
        print(f"{pair}, {label} of the samples: {diff:+.4f} [{low:+.4f}, {high:+.4f}]")


if __name__ == "__main__":
    main()
