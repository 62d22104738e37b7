"""Training memory and time by how a minibatch is cut into forward passes: the old default (16 sequences a
pass, no token cap) against caps on a pass's padded tokens. Each setting in a fresh process, alternated.

    python bench/micro_batch_memory.py --out docs/bench/DATE-micro-batch-memory.json [--rounds 2]

LoRA SFT on the embedded model, one torch thread: a warm-up step, then one timed minibatch of 32
sequences with the lengths of math seed-harness training calls (prompts 52-60 tokens, completions 29-48,
most hitting the 48-token cap). The same LoRA initialisation and examples on every side, so the loss must
agree; it is recorded beside the wall, CPU seconds, page faults and peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

SETTINGS = {
    "16 a pass, no cap": (16, 10**9),
    "cap 1024": (16, 1024),
    "cap 512": (16, 512),
    "cap 256": (16, 256),
}


def child(name: str) -> dict:
    import torch

    from whale.model.loading import load_model
    from whale.model.trainer import Trainer, TrainerConfig, TrainExample

    torch.set_num_threads(1)
    micro, tokens = SETTINGS[name]
    model, _ = load_model("embedded")
    rng = random.Random(0)
    examples = []
    for _ in range(64):
        prompt, completion = rng.randint(52, 60), 48 if rng.random() < 0.75 else rng.randint(29, 47)
        ids = [rng.randrange(100, 40000) for _ in range(prompt + completion)]
        examples.append(TrainExample(ids, [0] * prompt + [1] * completion))
    torch.manual_seed(0)  # the LoRA initialisation
    cfg = TrainerConfig(minibatch=32, micro_batch=micro, micro_batch_tokens=tokens)
    trainer = Trainer(model, 0, cfg, seed=0)
    trainer.train(examples[:32])
    start, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    stats = trainer.train(examples[32:])
    end = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "setting": name,
        "micro_batch": micro,
        "micro_batch_tokens": tokens,
        "wall_s": round(time.perf_counter() - start, 2),
        "user_s": round(end.ru_utime - usage.ru_utime, 2),
        "system_s": round(end.ru_stime - usage.ru_stime, 2),
        "page_faults": end.ru_minflt - usage.ru_minflt,
        "peak_mib": end.ru_maxrss // 1024,
        "loss": stats["loss"],
        "tokens": stats["tokens"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    from whale.core.provenance import SIMD_FLAGS, code_version, cpu_model_and_flags

    cpu, flags = cpu_model_and_flags()
    rows = []
    for round_ in range(args.rounds):
        for name in SETTINGS:
            out = subprocess.run(
                [sys.executable, __file__, "--out", str(args.out), "--child", name],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            row = {"round": round_, **json.loads(out.stdout.strip().splitlines()[-1])}
            print(json.dumps(row), flush=True)
            rows.append(row)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    record = {
        "commit": code_version(),
        "cpu": cpu,
        "flags": sorted(flags & set(SIMD_FLAGS)),
        "load_at_end": load,
        "rows": rows,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
