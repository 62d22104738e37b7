"""Where a float32 run and a bfloat16 run of one seed part: the serving dtype, the training dtype, or the
rollouts each happened to keep. Reads two finished runs of `bench/bf16_learning.py` (or any two runs of
one config but the dtype) and takes their first weight phase apart.

    python bench/dtype_replay.py --runs DIR/float32-seed0 DIR/bfloat16-seed0 --steps 4 --out FILE.json

1. Each run's weights after `--steps` weight steps (re-trained below, from its own kept rollouts) scored on
   the test split with the fast engine in float32 and in bfloat16: does the serving dtype change the score
   of given weights?
2. Each run's kept rollouts of those steps (built as its weight steps built them: `build_batch` with its
   config) trained from the initial weights with the trainer in float32 and in bfloat16, each scored with
   the float32 engine: does the training dtype change what the same data teaches?
Whatever neither explains is the trajectory: which rollouts each run kept. Scoring is in lockstep with
the run's seed and sampling, k samples per test task.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from whale.core.config import Config, EngineConfig
from whale.core.provenance import code_version, machine
from whale.domains.registry import build_domain
from whale.harness.calls import RolloutJob, RunnerLimits
from whale.harness.records import HarnessCandidate, Rollout
from whale.harness.runner import RolloutRunner
from whale.model.backends import build_engine
from whale.model.distributed import pad_id, trainer_config
from whale.model.engine import SamplingParams
from whale.model.loading import load_model
from whale.model.trainer import Trainer
from whale.run.rundir import RunDir
from whale.weights.weight_step import WeightSettings, build_batch

DTYPES = ("float32", "bfloat16")


def kept_steps(run: Path, cfg: Config, steps: int) -> list[list[Any]]:
    """The training examples of the run's first `steps` weight steps, rebuilt from rollouts/train.jsonl."""
    s = WeightSettings.from_config(cfg)
    per_step = s.tasks_per_step * s.k
    rows = [Rollout.from_json(json.loads(line)) for line in (run / "rollouts" / "train.jsonl").open()]
    return [
        build_batch(
            rows[i * per_step : (i + 1) * per_step], s.algorithm, s.threshold, s.max_kept_per_task,
            s.drop_uniform_groups, s.std_normalize,
        ).examples
        for i in range(steps)
    ]  # fmt: skip


def trained(cfg: Config, batches: list[list[Any]], dtype: str) -> Any:
    model, tokenizer = load_model(cfg.model.name, cfg.seed)
    trainer = Trainer(model, pad_id(tokenizer), trainer_config(cfg.weights, dtype), seed=cfg.seed)
    losses = [trainer.train(examples)["loss"] for examples in batches]
    return trainer.model, tokenizer, losses


def test_score(cfg: Config, model: Any, tokenizer: Any, dtype: str) -> float:
    domain = build_domain(cfg.domain)
    s = cfg.sampling
    sampling = SamplingParams(s.temperature, s.top_p, s.top_k, s.max_tokens)
    engine = build_engine(EngineConfig(kind="fast", dtype=dtype), model, tokenizer, cfg.model.max_batch)
    limits = RunnerLimits(workers=cfg.runner.workers, lockstep=True)
    runner = RolloutRunner(engine, domain, sampling, limits, seed=cfg.seed)
    harness = HarnessCandidate("seed", domain.seed_harness())
    jobs = [RolloutJob(t, harness, j) for t in domain.splits()["test"] for j in range(cfg.eval.k)]
    try:
        rollouts = runner.run(jobs)
    finally:
        runner.close()
    return sum(r.reward or 0.0 for r in rollouts) / len(rollouts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs=2, required=True, help="the float32 run, the bfloat16 run")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    result: dict[str, Any] = {"commit": code_version(), "machine": machine(), "steps": args.steps, "runs": {}}
    for run, run_dtype in zip(args.runs, DTYPES, strict=True):
        cfg = RunDir(run).load_config()
        batches = kept_steps(run, cfg, args.steps)
        entry: dict[str, Any] = {"folder": str(run), "kept_examples": [len(b) for b in batches]}
        for train_dtype in DTYPES:
            model, tokenizer, losses = trained(cfg, batches, train_dtype)
            model.eval()
            serve = DTYPES if train_dtype == run_dtype else ("float32",)
            scores = {d: test_score(cfg, model, tokenizer, d) for d in serve}
            entry[f"trained_{train_dtype}"] = {"losses": losses, "test_mean_by_engine_dtype": scores}
            print(f"{run.name}: trained in {train_dtype}, losses {[round(x, 4) for x in losses]}, "
                  f"test mean@{cfg.eval.k} {scores}", flush=True)  # fmt: skip
        result["runs"][run_dtype] = entry
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
