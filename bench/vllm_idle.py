"""The CPU that vLLM's processes take while the trainer has the cores: `python bench/vllm_idle.py OUT.json`.

Starts whale's VLLMEngine on the embedded model (as a run does), serves one batch, then measures the
CPU seconds of vLLM's engine-core processes (every descendant of this process) over an idle wait and
over a LoRA training step in this process, against the trainer's own CPU seconds in that step.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from whale.bench.machine import machine_facts  # noqa: E402
from whale.core.config import EngineConfig  # noqa: E402
from whale.core.provenance import code_version  # noqa: E402
from whale.model.backends import build_engine  # noqa: E402
from whale.model.engine import GenerationRequest, SamplingParams  # noqa: E402
from whale.model.loading import load_model  # noqa: E402
from whale.model.sampling import chat_prompt_ids  # noqa: E402
from whale.model.trainer import Trainer, TrainerConfig, TrainExample  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    found = [int(c) for c in children.read_text().split()] if children.exists() else []
    return found + [d for c in found for d in descendants(c)]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of one process (all its threads), from /proc; 0 for one that has exited."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def vllm_cpu() -> dict[int, float]:
    return {pid: cpu_seconds(pid) for pid in descendants(os.getpid())}


def spent(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(after[p] - before.get(p, 0.0) for p in after)


def main() -> None:
    out = Path(sys.argv[1])
    model, tokenizer = load_model("embedded", 0)
    trainer = Trainer(model, tokenizer.pad_token_id or 0, TrainerConfig(lora_r=16))
    model = trainer.model
    engine = build_engine(EngineConfig(kind="vllm"), model, tokenizer, 128)
    question = [{"role": "user", "content": "What is 17 + 25? Answer with the number."}]
    params = SamplingParams(temperature=1.0, max_tokens=32)
    engine.generate([GenerationRequest(question, params, seed=s) for s in range(64)], seed=0)
    result: dict[str, Any] = {"commit": code_version(), **machine_facts(model)}

    before, t0 = vllm_cpu(), time.monotonic()
    time.sleep(20)
    result["idle"] = {
        "wall_s": round(time.monotonic() - t0, 2),
        "vllm_cpu_s": round(spent(before, vllm_cpu()), 2),
    }

    prompt = chat_prompt_ids(tokenizer, question)
    reply = tokenizer(" The answer is 42.")["input_ids"]
    examples = [TrainExample(prompt + reply, [0] * len(prompt) + [1] * len(reply)) for _ in range(64)]
    before, own0, t0 = vllm_cpu(), time.process_time(), time.monotonic()
    for _ in range(3):
        trainer.train(examples)
    result["training"] = {
        "wall_s": round(time.monotonic() - t0, 2),
        "trainer_cpu_s": round(time.process_time() - own0, 2),
        "vllm_cpu_s": round(spent(before, vllm_cpu()), 2),
        "vllm_processes": len(descendants(os.getpid())),
    }
    engine.close()
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("idle", "training")}))


if __name__ == "__main__":
    main()
