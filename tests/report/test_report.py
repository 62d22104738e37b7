"""`whale.report.run_page`: the HTML report of a run or a comparison, on hand-made and on real tiny runs."""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from whale.core.config import ConfigError
from whale.core.files import read_json, read_jsonl
from whale.report.traces import rollout_html
from whale.report.write import write_report
from whale.studies.bottleneck import (
    attribute_gains,
    bottleneck_verdict,
    gain_per_1000,
    measured_totals,
    phase_intervals,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RUN_SECTIONS = ("summary", "cost", "curves", "rft", "search", "lineage", "diff", "bottleneck", "points",
                "accepted", "tasks", "traces", "config")  # fmt: skip
INJECTION = "<script>alert(1)</script>"
VOID = {"meta", "img", "br", "hr", "link", "input", "col", "area", "base", "source", "wbr"}


# ---- helpers ------------------------------------------------------------------------------------------


class TagChecker(HTMLParser):
    """Collects tags, ids and attributes; checks that non-void elements are closed in order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.ids: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self.ids += [v for k, v in attrs if k == "id" and v]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def check_page(text: str) -> TagChecker:
    """Doctype, charset, title, balanced tags, unique ids, and no external resource or script."""
    assert text.startswith("<!DOCTYPE html>")
    assert '<meta charset="utf-8">' in text and "<title>" in text
    checker = TagChecker()
    checker.feed(text)
    checker.close()
    assert not checker.errors and not checker.stack, (checker.errors, checker.stack)
    assert len(checker.ids) == len(set(checker.ids)), "duplicate ids"
    for tag, attrs in checker.tags:
        assert tag != "script", "the report must carry no script"
        for key in ("src", "href"):
            value = attrs.get(key) or ""
            assert not re.match(r"\s*(https?:)?//", value), f"external {key}: {value[:80]}"
        if tag == "link":
            raise AssertionError("no external stylesheets")
    return checker


def embedded_pngs(text: str) -> list[bytes]:
    return [base64.b64decode(b) for b in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)]


def section(text: str, anchor: str) -> str:
    start = text.index(f'<section id="{anchor}">')
    return text[start : text.index("</section>", start)]


def score(mean: float, half: float = 0.05) -> dict[str, Any]:
    return {
        "mean": mean,
        "ci_low": mean - half,
        "ci_high": mean + half,
        "n_tasks": 6,
        "k": 2,
        "pass_at_k": mean,
        "maj_at_k": mean,
    }


def point(n: int, rollouts: int, test: float, val: float, phase: str = "weights") -> dict[str, Any]:
    return {
        "point": n,
        "label": f"{rollouts} rollouts",
        "phase": phase,
        "weights": f"w{n}",
        "harness": "c0000",
        "val": score(val),
        "test": score(test),
        "rollouts": rollouts,
        "wall_s": 2.0 * n,
    }


def weight_step(step: int, rollouts: int, reward: float = 0.5) -> dict[str, Any]:
    return {
        "event": "weight_step",
        "step": step,
        "harnesses": {"c0000": 4},
        "train_reward": reward,
        "kept": 8,
        "total": 16,
        "examples": 8,
        "loss": 1.5,
        "unit": step,
        "rollouts": rollouts,
        "wall_s": 1.0,
    }


def search_iteration(it: int, rollouts: int, accepted: str | None, candidates: dict[str, float]):
    return {
        "event": "search_iteration",
        "iteration": it,
        "incumbent": accepted or "c0000",
        "incumbent_score": max(candidates.values()) if accepted else 0.2,
        "accepted": bool(accepted),
        "reason": "paired test",
        "candidates": candidates,
        "failed": {"c0009": "smoke test: boom"},
        "spent": 16,
        "proposal": "2 candidates",
        "proposer_cost": {},
        "unit": 3,
        "rollouts": rollouts,
        "wall_s": 3.0,
    }


def switch(frm: str, to: str, rollouts: int) -> dict[str, Any]:
    return {
        "event": "phase_switch",
        "from": frm,
        "to": to,
        "phase": 0,
        "length": 2,
        "reason": "fixed length",
        "signals": {},
        "unit": 2,
        "rollouts": rollouts,
        "wall_s": 1.0,
    }


SEED = "def run(task, llm, tools):\n    return llm.chat([{'role': 'user', 'content': 'hi'}])\n"
CHILD = SEED + "# </pre><script>alert(2)</script> tweak\n"


def add_candidate(
    run: Path,
    cid: str,
    parent: str | None,
    hypothesis: str,
    status: str,
    source: str,
    mean: float | None = None,
) -> None:
    folder = run / "search" / "candidates" / cid
    folder.mkdir(parents=True)
    (folder / "harness.py").write_text(source)
    meta = {
        "id": cid,
        "parent": parent,
        "hypothesis": hypothesis,
        "proposer": "llm",
        "status": status,
        "reason": "because <b>reasons</b>",
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    if mean is not None:
        (folder / "evals").mkdir()
        ev = {
            "candidate_id": cid,
            "weights_version": "w2",
            "per_task": {},
            "mean": mean,
            "tokens_per_rollout": 10.0,
            "calls_per_rollout": 1.0,
            "errors": 0,
        }
        (folder / "evals" / "w2.json").write_text(json.dumps(ev))


def make_run(run: Path, finished: bool = False, weights: bool = True, search: bool = True) -> Path:
    """A hand-made run: whale with 2 weight steps, 1 search iteration accepting c0001 (whose hypothesis
    is a script tag), 1 more weight step; 3 evaluation points. No summary.json (as if in progress)."""
    run.mkdir(parents=True)
    method = "whale" if weights and search else ("weight-only" if weights else "harness-only")
    config = {
        "name": "synth",
        "seed": 0,
        "model": {"name": "tiny"},
        "domain": {"name": "math"},
        "schedule": {"method": method, "start": "weights"},
        "proposer": {"kind": "llm"},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    events: list[dict[str, Any]] = [{"event": "start", "config": config}]
    if weights:
        events += [weight_step(1, 16, 0.25), weight_step(2, 32, 0.5)]
    if weights and search:
        events.append(switch("weights", "harness", 32))
    if search:
        base = 32 if weights else 0
        events += [
            {
                "event": "reeval",
                "harness": "c0000",
                "score": 0.2,
                "spent": 6,
                "unit": 2,
                "rollouts": base + 6,
                "wall_s": 2.0,
            },
            search_iteration(1, base + 22, "c0001", {"c0001": 0.6, "c0002": 0.3}),
        ]
    if weights and search:
        events += [switch("harness", "weights", 54), weight_step(3, 70, 0.75)]
    end = events[-1]["rollouts"]
    if finished:
        events.append({"event": "end", "reason": "budget spent", "unit": 4, "rollouts": end, "wall_s": 9.0})
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    points = [
        point(0, 0, 0.1, 0.1),
        point(1, 32 if weights else 22, 0.4, 0.35, "harness"),
        point(2, end, 0.6, 0.5),
    ]
    (run / "evals.jsonl").write_text("".join(json.dumps(p) + "\n" for p in points))
    add_candidate(run, "c0000", None, "seed harness", "seed", SEED, 0.2)
    if search:
        add_candidate(run, "c0001", "c0000", INJECTION, "accepted", CHILD, 0.6)
        add_candidate(run, "c0002", "c0001", "try a <tool> call & retry", "rejected", SEED, 0.3)
        add_candidate(run, "c0003", "c0002", "never evaluated", "invalid", "def run(:\n")
    budget = {
        "limit_rollouts": 60,
        "train_rollouts": 48 if weights else 0,
        "search_rollouts": 22 if search else 0,
        "eval_rollouts": 72,
        "model_calls": 142,
        "generated_tokens": 7008,
        "wall_s": 4000.0,
    }
    state = {
        "budget": budget,
        "weight_steps": 3 if weights else 0,
        "search_iters": int(search),
        "eval_points": 3,
        "incumbent": "c0001" if search else "c0000",
        "finished": finished,
        "proposer_usage": {"sessions": 2, "tokens": 1234, "usd": 0.5, "seconds": 30.0},
    }
    (run / "state.json").write_text(json.dumps(state))
    return run


# ---- the bottleneck attribution (hand-made points and events) -------------------------------------


def test_attribute_gains_splits_each_change_by_the_rollouts_each_phase_spent():
    points = [point(0, 0, 0.1, 0.1), point(1, 32, 0.4, 0.3), point(2, 70, 0.4, 0.3), point(3, 70, 0.5, 0.3)]
    events = [
        weight_step(1, 16),
        weight_step(2, 32),  # interval 0: 32 weight rollouts
        switch("weights", "harness", 32),
        {"event": "reeval", "spent": 6, "rollouts": 38},
        search_iteration(1, 54, None, {"c0001": 0.1}),  # interval 1: 6 + 16 search rollouts ...
        weight_step(3, 70),  # ... and 16 weight rollouts; an event at exactly 70 ends there
        {"event": "end", "rollouts": 70},
    ]
    intervals = attribute_gains(points, events)
    assert [(i.start_point, i.end_point) for i in intervals] == [(0, 1), (1, 2), (2, 3)]
    first, second, third = intervals
    assert (first.weight_rollouts, first.harness_rollouts) == (32, 0)
    assert first.gain("weights") == pytest.approx(0.3) and first.gain("harness") == 0.0
    assert not first.within_ci  # [0.05, 0.15] vs [0.35, 0.45]
    assert (second.weight_rollouts, second.harness_rollouts) == (16, 22)
    assert second.change == pytest.approx(0.0) and second.within_ci
    assert third.spent == 0 and third.gain("weights") == 0.0  # a change with no rollouts is not attributed
    rates = gain_per_1000(intervals)
    assert rates["weights"] == pytest.approx(1000 * 0.3 / 48)
    assert rates["harness"] == pytest.approx(0.0)
    verdict = bottleneck_verdict(intervals)
    assert verdict.startswith("Weight phases moved test accuracy more") and "noise" in verdict


def test_attribution_proportional_split_and_one_sided_runs():
    points = [point(0, 0, 0.2, 0.2), {**point(1, 40, 0.6, 0.5), "harness": "c0001"}]  # both sides changed
    events = [weight_step(1, 16), {"event": "search_iteration", "spent": 24, "rollouts": 40}]
    (interval,) = attribute_gains(points, events)
    assert interval.gain("weights") == pytest.approx(0.4 * 16 / 40)
    assert interval.gain("harness") == pytest.approx(0.4 * 24 / 40)
    assert gain_per_1000([interval]) == pytest.approx({"weights": 10.0, "harness": 10.0})
    assert "same rate" in bottleneck_verdict([interval])
    only = attribute_gains(points, [weight_step(1, 16), weight_step(2, 32)])
    assert gain_per_1000(only)["harness"] is None
    assert bottleneck_verdict(only).startswith("Only weight phases")
    assert attribute_gains(points[:1], events) == []
    flat = attribute_gains([point(0, 0, 0.2, 0.2), point(1, 40, 0.21, 0.2)], events)
    assert bottleneck_verdict(flat).startswith("Neither side measurably moved")


def test_a_side_that_changed_nothing_gets_no_credit():
    """The issue-24 run: the weights stayed w2 while a harness flip made the whole +1.0; most rollouts
    were weight steps that changed nothing (no update), which a split by rollout share would credit."""
    same_weights = [
        {**point(0, 0, 0.0, 0.0), "weights": "w2"},
        {**point(1, 60, 1.0, 1.0), "weights": "w2", "harness": "c0001"},
        {**point(2, 90, 0.9, 0.9), "weights": "w2", "harness": "c0001"},
    ]
    events = [weight_step(1, 50), {"event": "search_iteration", "spent": 10, "rollouts": 60},
              weight_step(2, 90)]  # fmt: skip
    flip, nothing = attribute_gains(same_weights, events)
    assert (flip.weight_rollouts, flip.harness_rollouts) == (16, 10) and flip.basis == "harness only changed"
    assert flip.gain("weights") == 0.0 and flip.gain("harness") == pytest.approx(1.0)
    assert nothing.basis == "nothing changed" and nothing.gain("weights") == nothing.gain("harness") == 0.0
    assert gain_per_1000([flip, nothing]) == pytest.approx({"weights": 0.0, "harness": 100.0})


def test_phase_intervals_follow_the_switches():
    events = [weight_step(1, 16), switch("weights", "harness", 32), switch("harness", "weights", 54)]
    assert phase_intervals("weights", events, 70) == [
        ("weights", 0.0, 32.0),
        ("harness", 32.0, 54.0),
        ("weights", 54.0, 70.0),
    ]
    assert phase_intervals("harness", [], 22) == [("harness", 0.0, 22.0)]
    assert phase_intervals("weights", [], 0) == []


# ---- reports of hand-made runs (fast) -------------------------------------------------------------------


def test_report_of_a_hand_made_run_escapes_everything_from_files(tmp_path):
    run = make_run(tmp_path / "run")
    text = write_report(run).read_text()
    checker = check_page(text)
    for anchor in RUN_SECTIONS:
        assert anchor in checker.ids
    assert INJECTION not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in section(text, "lineage")
    assert "<script>alert(2)" not in text and "&lt;/pre&gt;&lt;script&gt;alert(2)" in section(text, "diff")
    assert "<b>reasons</b>" not in text and "&lt;tool&gt; call &amp; retry" in text
    pngs = embedded_pngs(text)
    assert len(pngs) == 4 and all(p[:8] == PNG_MAGIC for p in pngs)
    lineage = section(text, "lineage")
    for cid in ("c0000", "c0001", "c0002", "c0003"):
        assert f'id="cand-{cid}"' in lineage
    # c0003 is nested three lists deep: c0000 > c0001 > c0002 > c0003
    assert lineage.index("cand-c0001") < lineage.index("cand-c0002") < lineage.index("cand-c0003")
    assert "not evaluated" in lineage and "(final)" in lineage
    diff = section(text, "diff")
    assert '<span class="add">+# &lt;/pre&gt;' in diff
    bottleneck = section(text, "bottleneck")
    assert "<table>" in bottleneck and "per 1,000 rollouts" in bottleneck
    assert "in progress" in section(text, "summary")
    assert "1,234 tokens, $0.50" in section(text, "cost") and "1h 06m" in section(text, "cost")
    assert not (run / "summary.json").exists()  # a report only reads the run


def test_the_trace_viewer_says_what_the_harness_said_of_each_calls_training():
    marks = [{"train": False}, {"credit": True}, {"credit": False}, {"train": True}]
    calls = [{"messages": [], "text": t, **m} for t, m in zip("abcd", marks, strict=True)]
    text = rollout_html({"task_id": "t", "sample": 0, "harness_id": "h", "reward": 1.0, "calls": calls})
    assert "model call 0 (train=False)</h4>" in text and "model call 1 (credited by the harness)</h4>" in text
    assert "model call 2 (not credited by the harness)</h4>" in text and "model call 3</h4>" in text


def test_measured_effects_are_shown_with_intervals_and_an_unmeasured_interval_says_why(tmp_path):
    run = make_run(tmp_path / "run")
    points = read_jsonl(run / "evals.jsonl")
    tasks = [f"t{i}" for i in range(10)]
    sides = {"weights": [0.25] * 10, "harness": [0.0, 0.5] * 5, "interaction": [0.0] * 10}
    points[1]["effects"] = {"basis": "measured: 2x2", "from_point": 0, "tasks": tasks, **sides}
    (run / "evals.jsonl").write_text("".join(json.dumps(p) + "\n" for p in points))
    text = write_report(run).read_text()
    check_page(text)
    bottleneck = section(text, "bottleneck")
    assert "Inconclusive which side carried the run" in bottleneck  # 0.25 vs 0.25: the difference covers zero
    assert "weights +0.250 [+0.250, +0.250]" in bottleneck and "measured: 2x2" in bottleneck
    assert "not measured: both sides changed, eval.cross off" in bottleneck  # the second interval
    assert "1 of 2 intervals were not measured" in bottleneck
    assert len(embedded_pngs(text)) == 5  # the measured effects are drawn too


def test_runs_without_search_or_weight_steps_show_none(tmp_path):
    text = write_report(make_run(tmp_path / "weights", finished=True, search=False)).read_text()
    check_page(text)
    for anchor in ("search", "diff"):
        assert 'class="none"' in section(text, anchor)
    assert 'class="none"' not in section(text, "lineage")  # the seed is still there
    text = write_report(make_run(tmp_path / "harness", weights=False)).read_text()
    check_page(text)
    assert 'class="none"' in section(text, "rft")
    assert "Only harness phases" in section(text, "bottleneck")


def test_an_rft_step_with_no_update_and_the_rft_table_columns(tmp_path):
    run = make_run(tmp_path / "run", finished=True, search=False)
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    for e in events:
        if e.get("event") == "weight_step" and e["step"] == 1:
            e["loss"], e["kept"], e["examples"] = float("nan"), 0, 0  # nothing passed the verifier
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    rft = section(write_report(run).read_text(), "rft")
    assert "no update" in rft and "nan" not in rft.lower()
    assert "<th>-</th>" not in rft and "<th>rollouts after</th>" in rft  # RFT has no signal column


def test_a_run_that_has_barely_started_shows_none_everywhere(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"name": "new", "schedule": {"method": "whale"}}))
    (run / "state.json").write_text(json.dumps({"budget": {"limit_rollouts": 60}, "finished": False}))
    text = write_report(run).read_text()
    check_page(text)
    for anchor in ("curves", "rft", "search", "lineage", "diff", "bottleneck", "points"):
        assert 'class="none"' in section(text, anchor), anchor
    assert not (run / "search").exists()


def test_not_a_run_directory_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not a whale run"):
        write_report(tmp_path)
    with pytest.raises(ConfigError):
        write_report(tmp_path / "missing")


def test_hand_made_comparison_replots_and_links_run_reports(tmp_path):
    out = tmp_path / "cmp"
    for method in ("whale", "weight-only"):
        make_run(out / method / "seed0", finished=True, search=method == "whale")
    ci = {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6}
    row = {
        "seeds": 1,
        "best_test": ci,
        "selected_test": ci,
        "vs_reference": None,
        "rollouts_to_95": 70.0,
        "rollouts": 70.0,
        "eval_rollouts": 72.0,
        "generated_tokens": 7008.0,
        "model_calls": 142.0,
        "wall_s": 30.0,
    }
    diff = {"mean_diff": -0.1, "ci_low": -0.3, "ci_high": 0.1, "n_tasks": 6}
    rows = [{"method": "whale", **row}, {"method": "weight-only", **row, "vs_reference": diff}]
    (out / "compare.json").write_text(json.dumps({"k": 2, "seeds": 1, "rows": rows}))
    text = write_report(out).read_text()
    checker = check_page(text)
    assert {"methods", "curves", "runs"} <= set(checker.ids)
    methods = section(text, "methods")
    assert "whale" in methods and "weight-only" in methods and "-0.100 [-0.300, +0.100]" in methods
    assert len(embedded_pngs(text)) == 1 and embedded_pngs(text)[0][:8] == PNG_MAGIC
    for method in ("whale", "weight-only"):
        assert f'href="{method}/seed0/report.html"' in text
        assert (out / method / "seed0" / "report.html").is_file()


# ---- reports of real tiny runs (slow) ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(compared: tuple[Path, str], tmp_path_factory) -> Path:
    """A finished tiny whale run: the session's tiny comparison's, run with the tiny preset's config."""
    out = tmp_path_factory.mktemp("report") / "run"
    shutil.copytree(compared[0] / "whale" / "seed0", out)
    return out


@pytest.mark.slow
def test_report_of_a_tiny_run(tiny_run):
    path = write_report(tiny_run)
    assert path == tiny_run / "report.html"
    text = path.read_text()
    checker = check_page(text)
    for anchor in RUN_SECTIONS:
        assert anchor in checker.ids
    for heading in (
        "Summary",
        "Budget and cost",
        "Validation and test curves",
        "RFT weight steps",
        "Harness search",
        "Harness lineage",
        "against the seed",
        "Bottleneck",
        "Evaluation points",
    ):
        assert heading in text, heading
    pngs = embedded_pngs(text)
    assert len(pngs) >= 4 and all(p[:8] == PNG_MAGIC for p in pngs)
    lineage = section(text, "lineage")
    state = read_json(tiny_run / "state.json")
    ids = sorted(p.name for p in (tiny_run / "search" / "candidates").iterdir())
    assert ids == state["candidates"] and len(ids) >= 2
    for cid in ids:
        assert f"<code>{cid}</code>" in lineage
    assert ("the seed harness was kept" in section(text, "diff")) == (state["incumbent"] == "c0000")
    bottleneck = section(text, "bottleneck")
    assert "Measured, on val" in bottleneck and "Apportioned, on test" in bottleneck
    assert "within CI" in bottleneck
    measured = measured_totals(read_jsonl(tiny_run / "evals.jsonl"))  # eval.cross is on by default here
    assert measured is not None and bottleneck.count("<table>") == 4
    assert section(text, "points").count("<tr>") == 1 + state["eval_points"]


@pytest.mark.slow
def test_injected_hypothesis_in_a_tiny_run_is_escaped(tiny_run, tmp_path):
    meta_file = tiny_run / "search" / "candidates" / "c0001" / "meta.json"
    original = meta_file.read_text()
    try:
        meta_file.write_text(json.dumps({**json.loads(original), "hypothesis": INJECTION}))
        text = write_report(tiny_run).read_text()
    finally:
        meta_file.write_text(original)
    check_page(text)
    assert INJECTION not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section(text, "lineage")


@pytest.mark.slow
def test_report_of_a_tiny_comparison(compared, tmp_path):
    out = tmp_path / "cmp"  # the session's six methods on the tiny preset, copied: the report writes into it
    shutil.copytree(compared[0], out)
    text = write_report(out).read_text()
    checker = check_page(text)
    assert {"methods", "curves", "runs"} <= set(checker.ids)
    methods = section(text, "methods")
    assert "<td>whale</td>" in methods and "<td>weight-only</td>" in methods
    assert embedded_pngs(text)[0] == (out / "compare.png").read_bytes()
    for method in ("whale", "whale-adaptive", "weight-only", "harness-only", "stagewise", "fast-slow"):
        assert f'href="{method}/seed0/report.html"' in text
        check_page((out / method / "seed0" / "report.html").read_text())


def chromium(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "Debian chromium is missing: `make test` installs it (apt-get install chromium)"
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--user-data-dir="]
    return subprocess.run([exe, *flags, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tiny_run, tmp_path):
    path = write_report(tiny_run)
    profile = str(tmp_path / "profile")
    dom = chromium(f"--user-data-dir={profile}", "--dump-dom", path.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = dom.stdout  # the DOM as Chromium built it, not our source text
    for anchor in RUN_SECTIONS:
        assert f'id="{anchor}"' in rendered, anchor
    assert rendered.count("<table") >= 5 and rendered.count('<img src="data:image/png;base64,') >= 4
    opened = rendered.split('<details class="rollout" open="">', 1)[1].split("</details>", 1)[0]
    shown = [  # the page opens on one trace of the start point: its prompt and the model's reply
        r for r in read_jsonl(tiny_run / "evals" / "000" / "test.jsonl")
        if r["calls"] and html.escape(r["calls"][0]["messages"][-1]["content"], quote=False) in opened
        and html.escape(r["calls"][0]["text"], quote=False) in opened
    ]  # fmt: skip
    assert shown, opened[:2000]
    shot = tmp_path / "shot.png"
    taken = chromium(
        f"--user-data-dir={profile}", "--window-size=1280,5000", f"--screenshot={shot}", path.as_uri()
    )
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    import numpy as np
    from PIL import Image

    rgb = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    coloured = int(((rgb.max(axis=2) - rgb.min(axis=2)) > 10).sum())  # plot lines, phase shading
    assert coloured > 50_000, f"only {coloured} coloured pixels: the plots did not render"  # broken: ~2k
