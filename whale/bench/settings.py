"""The bench's fixed inputs: sizes for --quick and full runs, prompts, seeds and the targets it reports
against."""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA = 1


SEED = 0


SYSTEM_PROMPT = "You are a helpful assistant. Solve the math problem."


INSTRUCTION = "Think step by step, then write: The answer is <number>."


FLOPS_FORMULA = (
    "FLOPs/token = 2 x matmul parameters; matmul parameters = all parameters minus the input-embedding "
    "table (a lookup, no FLOPs), counting the LM head once; with tied embeddings that is all parameters. "
    "Attention over the context (QK^T, AV) is left out, so the bound is slightly optimistic for the model."
)


TARGETS = {"engine_vs_transformers": 3.0, "engine_roofline_pct": 50.0, "trainer_vs_baseline": 1.5}


OVERHEAD_TARGET = 0.10


@dataclass(frozen=True)
class BenchSettings:
    batch_sizes: tuple[int, ...]
    max_new_tokens: int
    matmul_min_s: float  # each timed matmul sample runs at least this long
    matmul_samples: int  # best of this many samples
    train_examples: int
    minibatch: int
    micro_batch: int
    rollout_tasks: int
    rollout_workers: int
    rollout_max_tokens: int
    workload_tasks: int  # the rollout workload (workload_bench): tasks per domain, samples per task
    workload_k: int
    workload_max_tokens: int


QUICK = BenchSettings(
    batch_sizes=(8,), max_new_tokens=12, matmul_min_s=0.02, matmul_samples=3, train_examples=8,
    minibatch=4, micro_batch=2, rollout_tasks=4, rollout_workers=4, rollout_max_tokens=6,
    workload_tasks=2, workload_k=2, workload_max_tokens=6,
)  # fmt: skip


FULL = BenchSettings(
    batch_sizes=(16, 64), max_new_tokens=48, matmul_min_s=0.2, matmul_samples=3, train_examples=64,
    minibatch=32, micro_batch=16, rollout_tasks=32, rollout_workers=32, rollout_max_tokens=32,
    workload_tasks=32, workload_k=8, workload_max_tokens=48,
)  # fmt: skip
