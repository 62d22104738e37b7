"""Agent versions, bundles and retention on a real (tiny, greedy) run: what `whale export` writes answers as
the run's own evaluation did, its hashes verify, and a changed bundle is refused."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
import torch

import whale
from tests.cli.test_cli import assert_user_error
from tests.cli.test_cli import whale as whale_cli
from whale.cli.main import main
from whale.core.config import ConfigError
from whale.core.files import read_json, read_jsonl
from whale.deploy.bundle import BundleError, export_bundle, load_bundle_model, sha256_file, verify_bundle
from whale.deploy.diff import diff_bundles
from whale.deploy.versions import agent_versions, select_version
from whale.model.loading import load_model
from whale.model.trainer import TrainerConfig, load_trainable, with_lora
from whale.run.disk import retained_checkpoints, run_storage


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str


def whale_here(capsys: pytest.CaptureFixture, *args: str) -> Finished:
    """`whale ARGS` through the real entry point (whale.cli.main.main), in this process: the commands that
    need torch would spend seconds importing it again in a subprocess."""
    capsys.readouterr()
    with mock.patch.object(sys, "argv", ["whale", *args]), pytest.raises(SystemExit) as stop:
        main()
    out = capsys.readouterr()
    return Finished(stop.value.code or 0, out.out, out.err)


def eval_rollouts(run: Path, point: int, split: str = "test") -> dict[str, dict]:
    return {r["task_id"]: r for r in read_jsonl(run / "evals" / f"{point:03d}" / f"{split}.jsonl")}


def test_every_evaluation_point_is_a_version_and_retention_keeps_best_and_latest(agent_run):
    versions = agent_versions(agent_run)
    assert [(v.id, v.point, v.checkpoint) for v in versions] == [
        ("w0-c0000", 0, None), ("w2-c0000", 1, "u00002"), ("w4-c0000", 2, "u00004"),
    ]  # fmt: skip
    points = read_jsonl(agent_run / "evals.jsonl")
    assert [v.val for v in versions] == [p["val"] for p in points]
    # keep_every=2: point 1's weights went, point 2's (latest, and every 2nd point) stay
    state = read_json(agent_run / "state.json")
    assert sorted(p.name for p in (agent_run / "checkpoints").iterdir()) == ["u00004"]
    assert state["checkpoint"] == "u00004" and state["kept_checkpoints"] == ["u00004"]
    assert "no longer on disk" in versions[1].missing and not versions[0].missing and not versions[2].missing
    assert state["checkpoint_bytes"] > 2 * run_storage(agent_run)["checkpoints"]  # 4 written, 1 kept
    with pytest.raises(ConfigError, match="w2-c0000 .* cannot be exported: checkpoint u00002"):
        select_version(agent_run, "w2-c0000")
    with pytest.raises(ConfigError, match="not an agent version .* w0-c0000, w2-c0000, w4-c0000"):
        select_version(agent_run, "w9-c0000")
    with pytest.raises(ConfigError, match="never uses test"):
        select_version(agent_run, best="test")


def test_retention_keeps_every_nth_and_the_best_by_validation():
    vals = [0.1, 0.3, 0.2, 0.1, 0.5, 0.4, 0.5, 0.2]  # the best is point 4 (point 6 ties it later)
    points = [{"point": i, "val": {"mean": v}, "checkpoint": f"u{i:05d}" if i else None}
              for i, v in enumerate(vals)]  # fmt: skip
    assert retained_checkpoints(points, 3, 1) == {"u00003", "u00004", "u00006"}
    assert retained_checkpoints(points, 3, 2) == {"u00003", "u00004", "u00006"}
    assert retained_checkpoints(points, 3, 3) == {"u00003", "u00004", "u00005", "u00006"}
    assert retained_checkpoints(points, 100, 0) == set()  # point 0 is the base model: nothing to keep
    assert retained_checkpoints(points, 1, 0) == {f"u{i:05d}" for i in range(1, 8)}


@pytest.mark.parametrize("adapter", [False, True], ids=["merged", "adapter"])
def test_exported_agent_answers_as_the_runs_evaluation(agent_run, tmp_path, adapter):
    version = agent_versions(agent_run)[-1]
    out = tmp_path / "bundle"
    manifest = export_bundle(agent_run, version, out, adapter=adapter)
    assert manifest["weights_format"] == ("adapter" if adapter else "merged")
    assert (out / ("adapter/adapter_model.safetensors" if adapter else "model/model.safetensors")).is_file()
    assert manifest["agent"] == "w4-c0000" and manifest["point"] == 2 and manifest["checkpoint"] == "u00004"
    assert manifest["scores"]["test"] == read_jsonl(agent_run / "evals.jsonl")[2]["test"]
    assert manifest["config"]["sampling"]["temperature"] == 0.0
    assert {"whale", "torch", "transformers", "peft"} <= set(manifest["packages"])
    listed = sorted(manifest["files"])
    assert {"README.md", "harness.py", "domain.json", "scores.json"} <= set(listed)
    assert all(sha256_file(out / name) == manifest["files"][name] for name in listed)
    assert verify_bundle(out) == manifest
    assert (out / "harness.py").read_text() == (agent_run / "search/candidates/c0000/harness.py").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name != "bundle"]  # no temporary folder left

    evaluated = eval_rollouts(agent_run, 2)
    with whale.load_agent(out) as agent:
        tasks = agent.domain.splits()["test"]
        answers = agent.run_many([t.inputs for t in tasks])  # a user's inputs: no gold, no reward
        verified = agent(tasks[0])  # a domain task: verified like the evaluation
    for task, got in zip(tasks, answers, strict=True):
        want = evaluated[task.id]
        assert got.error is None and got.reward is None and got.agent == "w4-c0000"
        assert got.answer == want["answer"] and got.answer  # the model's reply, not empty
        call, want_call = got.trace.calls[0], want["calls"][0]
        assert call.prompt_ids == want_call["prompt_ids"]
        assert call.completion_ids == want_call["completion_ids"]
        assert got.trace.weights_version == "w4"
    assert verified.reward == evaluated[tasks[0].id]["reward"] and verified.answer == answers[0].answer


def test_bundle_weights_are_the_runs_trained_weights(agent_run, agent_bundle, tmp_path):
    """The bundle's model computes what the run's model at that checkpoint computed, not the base's."""
    adapter = tmp_path / "adapter"
    export_bundle(agent_run, agent_versions(agent_run)[-1], adapter, adapter=True)
    base, tokenizer = load_model("tiny", 0)
    trained = with_lora(load_model("tiny", 0)[0], TrainerConfig())
    load_trainable(trained, agent_run / "checkpoints" / "u00004")
    ids = torch.tensor([tokenizer("What is 6 times 7? Answer with a number.")["input_ids"]])
    with torch.no_grad():
        want, base_logits = trained(input_ids=ids).logits, base(input_ids=ids).logits
        assert (want - base_logits).abs().max() > 1e-4  # training moved the weights
        for folder in (agent_bundle, adapter):
            model, _ = load_bundle_model(folder, verify_bundle(folder))
            assert torch.allclose(model(input_ids=ids).logits, want, atol=1e-5), folder.name


def test_changed_missing_or_added_files_are_refused(agent_bundle, tmp_path, capsys):
    copy = tmp_path / "b"
    shutil.copytree(agent_bundle, copy)
    harness = copy / "harness.py"
    harness.write_text(harness.read_text().replace("max_tokens=8", "max_tokens=9"))
    with pytest.raises(BundleError, match=r"harness.py: sha256 differs from manifest.json"):
        whale.load_agent(copy)
    assert_user_error(whale_here(capsys, "agent", str(copy), "--input", '{"question": "1+1?"}'),
                      f"{harness}: sha256 differs")  # fmt: skip
    shutil.copyfile(agent_bundle / "harness.py", harness)
    assert verify_bundle(copy)["agent"] == "w4-c0000"

    (copy / "model" / "config.json").unlink()
    with pytest.raises(BundleError, match=r"model/config.json: missing \(listed in manifest.json\)"):
        verify_bundle(copy)
    shutil.copyfile(agent_bundle / "model" / "config.json", copy / "model" / "config.json")
    (copy / "model" / "extra.safetensors").write_bytes(b"x")
    with pytest.raises(BundleError, match=r"model/extra.safetensors: not part of the exported bundle"):
        verify_bundle(copy)
    (copy / "model" / "extra.safetensors").unlink()
    (copy / "manifest.json").write_text("{")
    with pytest.raises(BundleError, match="manifest.json: not valid JSON"):
        verify_bundle(copy)
    with pytest.raises(BundleError, match="not a whale agent bundle"):
        verify_bundle(tmp_path)


def test_a_failed_export_leaves_nothing(agent_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(agent_run, run)
    (run / "checkpoints" / "u00004" / "weights.safetensors").write_bytes(b"truncated")
    with pytest.raises(ConfigError, match="u00004: cannot load its weights"):
        export_bundle(run, agent_versions(run)[-1], tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_diff_reports_harness_weights_and_paired_scores(agent_run, agent_bundle, tmp_path, capsys):
    base = tmp_path / "w0"
    export_bundle(agent_run, agent_versions(agent_run)[0], base)
    d = diff_bundles(base, agent_bundle, "test")
    assert d.harness_diff == ""  # the seed harness at both points
    changed = [t for t in d.tensors if t.norm > 0]
    assert changed and d.weights_total > 0
    assert all(any(k in t.name for k in ("q_proj", "k_proj", "v_proj", "o_proj", "mlp")) for t in changed)
    assert any("embed_tokens" in t.name and t.norm == 0 for t in d.tensors)  # LoRA never touches it
    s = d.scores
    assert s is not None and s.paired.n_tasks == 3 and s.split == "test"
    assert s.mean_b - s.mean_a == pytest.approx(s.paired.mean_diff)
    assert s.significant == (s.paired.ci_low > 0 or s.paired.ci_high < 0)
    with pytest.raises(BundleError, match="--split train"):
        diff_bundles(base, agent_bundle, "train")

    cli = whale_here(capsys, "diff", str(base), str(agent_bundle), "--split", "val")
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert "harness: identical code" in cli.stdout and "||B - A||" in cli.stdout
    assert "val mean: A" in cli.stdout and "over 3 paired tasks" in cli.stdout


@pytest.mark.slow
def test_command_line_lists_exports_runs_and_refuses_mistakes(agent_run, tmp_path, capsys):
    listing = whale_here(capsys, "agents", str(agent_run))
    assert listing.returncode == 0, listing.stderr[-2000:]
    pruned = "w2-c0000 (point 1) cannot be exported: checkpoint u00002 is no longer on disk"
    for words in ("w0-c0000", "w4-c0000", "best val", "u00004", "storage:", pruned):
        assert words in listing.stdout, words
    status = whale_here(capsys, "status", str(agent_run))
    assert "storage:" in status.stdout and "checkpoints" in status.stdout

    out = tmp_path / "bundle"
    # the two commands a user runs first, in their own processes; the rest in this one
    exported = whale_cli("export", str(agent_run), "--version", "w4-c0000", "--out", str(out))
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert "exported agent w4-c0000" in exported.stdout and verify_bundle(out)["agent"] == "w4-c0000"
    task = read_jsonl(agent_run / "evals" / "002" / "test.jsonl")[0]
    question = task["calls"][0]["messages"][0]["content"]
    ran = whale_cli("agent", str(out), "--input", json.dumps({"question": question}))
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads(ran.stdout)["answer"] == task["answer"]

    def refused(*args: str, words: str) -> None:
        assert_user_error(whale_here(capsys, *args), words)

    refused("agents", str(tmp_path / "nope"), words="not a whale run")
    refused("export", str(tmp_path / "nope"), "--out", str(tmp_path / "x"), words="not a whale run")
    refused("export", str(agent_run), "--version", "w7-c0000", "--out", str(tmp_path / "x"),
            words="--version w7-c0000: not an agent version")  # fmt: skip
    refused("export", str(agent_run), "--version", "w2-c0000", "--out", str(tmp_path / "x"),
            words="checkpoint u00002 is no longer on disk")  # fmt: skip
    refused("export", str(agent_run), "--best", "test", "--out", str(tmp_path / "x"), words="never uses test")
    refused("export", str(agent_run), "--out", str(out), words="already exists")
    refused("agent", str(out), "--input", "{not json", words="--input: invalid JSON")
    refused("agent", str(out), "--input", "[1, 2]", words="expected a JSON object of task inputs, got list")
    refused("agent", str(out), words="give one of --input JSON or --task ID")
    refused("agent", str(out), "--input", "{}", "--engine", "gpu", words="engine 'gpu': one of auto")
    refused("agent", str(tmp_path / "nope"), "--input", "{}", words="not a whale agent bundle")
    assert not (tmp_path / "x").exists()


def test_inputs_the_harness_cannot_use_fail_alone(agent_bundle):
    """Inputs without the field the harness reads crash that rollout only; the batch's other task is
    answered, and the answer says why."""
    with whale.load_agent(agent_bundle) as agent:
        bad, good = agent.run_many([{"puzzle": "x"}, {"question": "What is 2+2?"}])
    assert bad.error.startswith("crash: KeyError") and bad.answer is None and bad.reward is None
    assert good.error is None and good.answer
    with pytest.raises(ValueError, match="expected a JSON object of task inputs, got str"):
        agent("What is 2+2?")


def test_an_agent_answers_on_another_engine_when_asked(agent_bundle):
    """`engine=` swaps the engine under the same weights and harness (a one-shot answer need not start
    vLLM); greedy, the reference engine gives the run's engine's answers token for token."""
    with whale.load_agent(agent_bundle, temperature=0) as own, whale.load_agent(agent_bundle, 0, "hf") as hf:
        tasks = own.domain.splits()["test"][:4]
        want, got = own.run_many(tasks), hf.run_many(tasks)
        engines = type(own.runner.engine).__name__, type(hf.runner.engine).__name__
    assert engines == ("FastEngine", "HFEngine")
    for a, b in zip(want, got, strict=True):
        assert a.error is None and b.error is None
        assert [c.completion_ids for c in a.trace.calls] == [c.completion_ids for c in b.trace.calls]
