"""RFT, DPO and GRPO weight phases in real tiny whale runs, compared with `whale compare`, and a GRPO run
killed and resumed.

The domain is tests/fixtures/parity_domain.py, whose reward is a coin flip under the random tiny model, so
every algorithm sees tasks with both passing and failing rollouts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_cli import check_complete_run, run_in_background, whale
from tests.studies.test_compare import COUNTS, sampled
from whale.core.config import ConfigError, load_config
from whale.core.files import read_json, read_jsonl
from whale.studies.compare import method_config, parse_methods

PARITY = Path(__file__).resolve().parents[1] / "fixtures" / "parity_domain.py"
METHODS = "whale,whale+dpo,whale+grpo"
# Pairs need failures (threshold 1), the KL penalty is on, and evaluation is cut to its start and end points.
SETTINGS = ("rft.reward_threshold=1.0", "weights.kl_coef=0.05", "eval.every_rollouts=60",
            "domain.sizes.val=4", "domain.sizes.test=4")  # fmt: skip


def test_methods_may_name_a_weight_algorithm_and_a_rescue_mode():
    assert parse_methods("whale,whale+dpo,weight-only+grpo") == ["whale", "whale+dpo", "weight-only+grpo"]
    assert parse_methods("weight-only+distill,whale+grpo+on_policy")
    for bad in ("whale+ppo", "whale+", "gepa+dpo", "whale+dpo+grpo", "whale+distill+on_policy", "+dpo"):
        with pytest.raises(ConfigError, match="unknown method"):
            parse_methods(bad)
    base = load_config("tiny")
    cfg = method_config(base, "weight-only+grpo+on_policy", 1)
    assert (cfg.schedule.method, cfg.weights.algorithm, cfg.weights.rescue, cfg.seed) == (
        "weight-only", "grpo", "on_policy", base.seed + 1,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="rescue=distill is built for algorithm=rft"):
        method_config(base, "whale+dpo+distill", 0)


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("algorithms") / "cmp"
    settings = [arg for item in SETTINGS for arg in ("--set", item)]
    proc = whale("compare", "--domain-file", str(PARITY), "--methods", METHODS, "--preset", "tiny",
                 *settings, "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_every_algorithm_completes_a_tiny_whale_run_and_logs_its_metrics(compared):
    table = read_json(compared / "compare.json")
    assert [r["method"] for r in table["rows"]] == METHODS.split(",")
    for method, algorithm in (("whale", "rft"), ("whale+dpo", "dpo"), ("whale+grpo", "grpo")):
        folder = compared / method / "seed0"
        state = check_complete_run(folder)
        assert read_json(folder / "summary.json")
        events = read_jsonl(folder / "events.jsonl")
        assert events[0]["config"]["weights"]["algorithm"] == algorithm
        assert events[0]["config"]["schedule"]["method"] == "whale"
        steps = [e for e in events if e["event"] == "weight_step"]
        assert len({e["phase"] for e in steps}) == 2  # two weight phases: the reference is re-frozen
        for e in steps:
            assert e["algorithm"] == algorithm
            assert e["kept_fraction"] == e["kept"] / e["total"]
            assert sum(e["examples_by_harness"].values()) == e["examples"]
            assert set(e["examples_by_harness"]) <= set(e["harnesses"])
            assert e["kl"] is not None and e["kl"] >= 0.0
            assert (e["margin"] is not None) == (algorithm == "dpo")
            assert (e["mean_abs_advantage"] is not None) == (algorithm == "grpo")
        assert any(e["examples"] > 0 and e["kl"] > 0.0 for e in steps)
        if algorithm == "dpo":
            assert all(e["kept"] % 2 == 0 and e["examples"] >= e["kept"] for e in steps)  # whole pairs
            assert any(e["kept"] for e in steps)
        if algorithm == "grpo":
            assert any(e["mean_abs_advantage"] > 0 for e in steps)
        calls = [c for r in read_jsonl(folder / "rollouts/train.jsonl") for c in r["calls"]]
        if algorithm == "grpo":  # sampling log-probs are kept, one per generated token, for GRPO only
            assert all(len(c["logprobs"]) == len(c["completion_ids"]) for c in calls)
        else:
            assert not any("logprobs" in c for c in calls)
        # the last weight phase's reference is the checkpoint written when it started, kept on disk
        assert state["reference_checkpoint"] in state["kept_checkpoints"]
        assert (folder / "checkpoints" / state["reference_checkpoint"] / "weights.safetensors").is_file()
        report = (folder / "report.html").read_text()
        assert f"{algorithm.upper()} weight steps" in report and "KL to phase start" in report
    status = whale("status", str(compared)).stdout
    assert "whale+dpo on parity_domain" in status and "whale+grpo on parity_domain" in status


@pytest.mark.slow
def test_a_killed_grpo_run_resumes_to_the_same_end(compared, tmp_path):
    reference = compared / "whale+grpo" / "seed0"
    out = tmp_path / "run"
    overrides = ("domain=parity_domain", f"domain.file={PARITY}", "weights.algorithm=grpo", *SETTINGS)
    with run_in_background(out, *overrides):
        pass  # killed mid-unit on leaving
    resumed = whale("run", "--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    state, expected = check_complete_run(out), read_json(reference / "state.json")
    assert {k: state[k] for k in COUNTS} == {k: expected[k] for k in COUNTS}
    assert state["reference_checkpoint"] == expected["reference_checkpoint"]
    assert sampled(out / "rollouts/train.jsonl") == sampled(reference / "rollouts/train.jsonl")
    events = read_jsonl(out / "events.jsonl")
    assert [e["event"] for e in events].count("resume") == 1
    steps = [e for e in events if e["event"] == "weight_step"]
    assert [e["step"] for e in steps] == list(range(1, state["weight_steps"] + 1))
    assert all(e["algorithm"] == "grpo" and e["mean_abs_advantage"] is not None for e in steps)
