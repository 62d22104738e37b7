"""The rollout workload through whale's own runner: TASKS math tasks x K samples of the domain's seed
harness, sampling as the default config (T=1.0, 48 tokens), for one engine per call:

    python bench/engine_workload.py vllm|fast|hf      # RolloutRunner, cold (workers spawn) then warm
    python bench/engine_workload.py generate          # transformers.generate, num_return_sequences=K,
                                                      # on the same first-call prompts

Each prints one RESULT line of JSON. docs/performance.md has the numbers and how they were run; the
next step is to fold this into `whale bench` (issue 30)."""
import json, os, sys, time

def main():
    kind = sys.argv[1]
    n_tasks, k = int(os.environ.get("TASKS", "32")), int(os.environ.get("K", "8"))
    from whale.core.config import Config, EngineConfig
    from whale.domains.math import MathDomain
    from whale.harness.calls import RolloutJob, RunnerLimits
    from whale.harness.records import HarnessCandidate
    from whale.harness.runner import RolloutRunner
    from whale.model.backends import build_engine
    from whale.model.engine import SamplingParams
    from whale.model.loading import load_model
    base = Config()
    model, tok = load_model("embedded", 0)
    model.eval()
    t0 = time.perf_counter()
    engine = build_engine(EngineConfig(kind=kind, vllm={"enforce_eager": os.environ.get("EAGER", "1") == "1"}), model, tok, 256)
    startup = time.perf_counter() - t0
    domain = MathDomain(seed=0, sizes={"train": 1, "search": n_tasks, "val": 1, "test": 1})
    tasks = domain.splits()["search"]
    s = base.sampling
    sampling = SamplingParams(s.temperature, s.top_p, s.top_k, s.max_tokens)
    harness = HarnessCandidate("seed", domain.seed_harness())
    runner = RolloutRunner(engine, domain, sampling, RunnerLimits(workers=32), seed=0)
    out = {"kind": kind, "startup_s": startup, "tasks": n_tasks, "k": k, "temperature": s.temperature, "max_tokens": s.max_tokens}
    try:
        for rep in ("cold", "warm"):
            jobs = [RolloutJob(t, harness, j, salt=rep) for t in tasks for j in range(k)]
            before = getattr(engine, "tokens_generated", 0)
            t1 = time.perf_counter()
            rollouts = runner.run(jobs)
            wall = time.perf_counter() - t1
            toks = sum(len(c.completion_ids) for r in rollouts for c in r.calls) if rollouts and hasattr(rollouts[0].calls[0] if rollouts[0].calls else None, "completion_ids") else None
            calls = [c for r in rollouts for c in r.calls]
            out[rep] = {"wall_s": wall, "rollouts": len(rollouts), "failed": sum(r.error is not None for r in rollouts),
                        "mean_reward": sum(r.reward or 0 for r in rollouts) / len(rollouts), "calls": len(calls)}
            if hasattr(engine, "tokens_generated"):
                out[rep]["tokens"] = engine.tokens_generated - before
                out[rep]["tokens_per_s"] = out[rep]["tokens"] / wall
            print(rep, json.dumps(out[rep]), flush=True)
    finally:
        runner.close()
    print("RESULT", json.dumps(out), flush=True)


def hfgen():
    import torch
    from transformers import GenerationConfig
    from whale.domains.math import MathDomain
    from whale.harness.calls import RolloutJob, RunnerLimits
    from whale.harness.records import HarnessCandidate
    from whale.harness.runner import RolloutRunner
    from whale.model.loading import load_model
    from whale.model.hf_engine import HFEngine
    from whale.model.engine import SamplingParams
    from whale.model.sampling import chat_prompt_ids
    n_tasks, k = int(os.environ.get("TASKS", "32")), int(os.environ.get("K", "8"))
    model, tok = load_model("embedded", 0); model.eval()
    # Capture the seed harness's prompts by running one sample per task through HFEngine.
    domain = MathDomain(seed=0, sizes={"train": 1, "search": n_tasks, "val": 1, "test": 1})
    tasks = domain.splits()["search"]
    prompts = []
    class Capture(HFEngine):
        def generate(self, requests, seed):
            prompts.extend(r.messages for r in requests)
            return super().generate(requests, seed)
    runner = RolloutRunner(Capture(model, tok, max_batch=64), domain, SamplingParams(1.0, 1.0, 0, 1), RunnerLimits(workers=32), seed=0)
    runner.run([RolloutJob(t, HarnessCandidate("seed", domain.seed_harness()), 0) for t in tasks]); runner.close()
    ids = [chat_prompt_ids(tok, m) for m in prompts]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    width = max(map(len, ids))
    x = torch.full((len(ids), width), pad); mask = torch.zeros_like(x)
    for r, s in enumerate(ids):
        x[r, width - len(s):] = torch.tensor(s); mask[r, width - len(s):] = 1
    cfg = GenerationConfig(max_new_tokens=48, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=k, pad_token_id=pad, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    t = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=x, attention_mask=mask, generation_config=cfg)
    dt = time.perf_counter() - t
    gen = out[:, width:]
    n = 0
    for row in gen.tolist():
        for i, t_ in enumerate(row):
            n += 1
            if t_ == tok.eos_token_id: break
    print("RESULT", json.dumps({"kind": "transformers.generate", "prompts": len(ids), "k": k, "wall_s": dt, "tokens": n, "tokens_per_s": n / dt}), flush=True)

if __name__ == "__main__":
    hfgen() if sys.argv[1] == "generate" else main()
