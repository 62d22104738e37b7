"""`whale results`: summaries, the claims' arithmetic, and docs/results.md regenerated from the summaries."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.cli.test_cli import assert_user_error, whale
from whale.core.config import load_config
from whale.core.files import read_json
from whale.core.stats import PairedDifference
from whale.studies.claims import (
    FLOOR,
    PAPER_MIN_GAIN,
    claim_a,
    claim_b,
    claim_c,
    claim_d,
    claim_e,
    fisher_greater,
    gain_verdict,
    search_acceptance,
    unchanged_challengers,
)
from whale.studies.compare import RunData, build_rows, mean_curve
from whale.studies.plan import SIX, STUDIES, Study, StudySummary, load_summary
from whale.studies.results import render, section_run_time, section_weight_steps
from whale.studies.running import run_study

DOCS = Path(__file__).resolve().parents[2] / "docs"
TASKS = tuple(
    f"t{i}" for i in range(12)
)  # enough for a test: fewer than 10 differing tasks go to the sign test


def fake_run(method: str, curve: list[tuple[int, float]], events: list[dict[str, Any]] = ()) -> RunData:
    """A run whose every task scores the curve's value at each point (so paired CIs are exact)."""
    points = []
    for i, (rollouts, mean) in enumerate(curve):
        score = {"mean": mean, "ci_low": mean, "ci_high": mean}
        tasks = {t: mean for t in TASKS}
        points.append(
            {
                "point": i,
                "rollouts": rollouts,
                "val": score,
                "test": score,
                "tasks": {"val": tasks, "test": tasks},
            }
        )
    budget = {"train_rollouts": curve[-1][0], "search_rollouts": 0, "eval_rollouts": 0, "wall_s": 1.0}
    return RunData(method, 0, points, budget, list(events))


def study(name: str, curves: dict[str, list[tuple[int, float]]], events: dict[str, list] | None = None):
    runs = {m: [fake_run(m, c, (events or {}).get(m, []))] for m, c in curves.items()}
    meta = {"k": 8, "methods": list(curves), "preset": "x", "overrides": [], "domain": name, "seeds": 1}
    return StudySummary(Study(name, name, "x", tuple(curves)), meta, runs)


def step(rollouts: int) -> dict[str, Any]:
    return {"event": "weight_step", "total": 64, "rollouts": rollouts}


def search(rollouts: int, accepted: bool) -> dict[str, Any]:
    return {"event": "search_iteration", "accepted": accepted, "spent": 64, "rollouts": rollouts}


def test_gain_verdict_reads_the_interval_and_the_corrected_p_value():
    d = lambda lo, hi, p=0.01: PairedDifference((lo + hi) / 2, lo, hi, 5, p=p)  # noqa: E731
    assert gain_verdict(d(0.05, 0.09), PAPER_MIN_GAIN) == "reproduced"
    held = d(0.05, 0.09)
    held.p_holm = 0.09  # significant alone, not after Holm's correction over its family
    assert gain_verdict(held, PAPER_MIN_GAIN) == "inconclusive"
    assert gain_verdict(d(0.05, 0.09, p=None), PAPER_MIN_GAIN) == "inconclusive"  # no test, no verdict
    assert gain_verdict(d(0.01, 0.09), PAPER_MIN_GAIN).startswith("reproduced in direction")
    assert gain_verdict(d(-0.03, -0.01)) == "not reproduced"
    assert (
        gain_verdict(d(-0.02, 0.03), PAPER_MIN_GAIN) == "not reproduced"
    )  # excludes the paper's 4.15 points
    assert gain_verdict(d(-0.02, 0.09), PAPER_MIN_GAIN) == "inconclusive"


def test_search_acceptance_splits_iterations_at_the_first_weight_step():
    runs = [fake_run("w", [(0, 0.0)], [search(64, True), search(128, False), step(192), search(256, True)])]
    assert search_acceptance(runs, after_weights=False) == (1, 2)
    assert search_acceptance(runs, after_weights=True) == (1, 1)


def test_challengers_tied_with_the_incumbent_are_counted_but_not_a_newly_accepted_incumbent():
    events = [
        {
            "event": "search_iteration",
            "incumbent": "c0",
            "incumbent_score": 0.25,
            "candidates": {"c1": 0.25, "c2": 0.5},
        },
        {
            "event": "search_iteration",
            "incumbent": "c3",
            "incumbent_score": 0.5,
            "candidates": {"c3": 0.5, "c4": 0.5},
        },
    ]
    assert unchanged_challengers([fake_run("w", [(0, 0.0)], events)]) == (2, 3)


def test_mean_curve_averages_seeds_point_by_point():
    runs = [fake_run("w", [(0, 0.1), (100, 0.3)]), fake_run("w", [(0, 0.3), (120, 0.5), (200, 0.9)])]
    assert [x for point in mean_curve(runs) for x in point] == pytest.approx([0, 0.2, 110, 0.4])


def curves(whale: float, others: float) -> dict[str, list[tuple[int, float]]]:
    out = {m: [(0, 0.1), (300, others), (600, others)] for m in SIX}
    out["whale"] = [(0, 0.1), (300, whale), (600, whale)]
    return out


def test_claims_a_and_d_follow_the_paired_differences():
    better = study("math", curves(whale=0.5, others=0.2))
    assert claim_a([better]).verdict == "reproduced"
    assert claim_d([better]).verdict == "reproduced"
    worse = study("math", curves(whale=0.2, others=0.3))
    assert claim_a([worse]).verdict == "not reproduced"
    assert claim_d([worse]).verdict == "not reproduced"
    assert "whale - weight-only validation-selected mean@8 +30.0 pts" in claim_a([better]).measured[0]
    assert "p (Holm) 0.00" in claim_a([better]).measured[0]


def test_a_domain_at_the_floor_is_inconclusive_and_does_not_decide_the_claim():
    floor = study("chess", {m: [(0, 0.0), (300, 0.0), (600, 0.0)] for m in SIX})
    better = study("math", curves(whale=0.5, others=0.2))
    for claim in (claim_a, claim_d, claim_e):
        assert claim([floor]).verdict == "inconclusive"
        assert all(line.endswith(FLOOR) for line in claim([floor]).measured), claim([floor]).measured
    assert claim_a([better, floor]).verdict == "reproduced"  # the floor domain is no evidence either way
    assert claim_d([better, floor]).verdict == "reproduced"
    solved_once = study(
        "chess", {**{m: [(0, 0.0), (600, 0.0)] for m in SIX}, "whale": [(0, 0.0), (600, 0.2)]}
    )
    assert FLOOR not in claim_a([solved_once]).measured[0]  # one method off the floor: a real comparison


def test_run_time_counts_a_run_shared_by_two_studies_once():
    math = study("math", {"whale": [(0, 0.1), (60, 0.2)], "weight-only": [(0, 0.1), (60, 0.3)]})
    shared = StudySummary(
        Study("math-algorithms", "t", "x", ("whale", "whale+dpo"), folder="math"),
        math.meta,
        {"whale": math.runs["whale"], "whale+dpo": [fake_run("whale+dpo", [(0, 0.1), (60, 0.2)])]},
    )
    table = "\n".join(section_run_time([math, shared]))
    assert "| math | 2 | 0 min 02 s | 2 | 0 min 02 s |" in table
    assert "| math-algorithms | 2 | 0 min 02 s | 1 | 0 min 01 s |" in table
    assert "| all (each run once) |  |  | 3 | 0 min 03 s |" in table


def test_claim_b_compares_rollouts_to_weight_only_peak():
    fast = {
        "weight-only": [(0, 0.1), (300, 0.2), (600, 0.4)],
        "harness-only": [(0, 0.1), (300, 0.4), (600, 0.4)],
    }
    assert claim_b(study("searchqa", fast)).verdict == "reproduced"
    slow = {**fast, "harness-only": [(0, 0.1), (300, 0.2), (600, 0.3)]}
    claim = claim_b(study("searchqa", slow))
    assert claim.verdict == "not reproduced" and "never reaches it" in claim.measured[0]
    assert claim_b(None).verdict == "not run"


def test_fisher_exact_tail_matches_hand_computed_values():
    # 3 of 3 successes in the first of two groups of 3: 1 / C(6, 3)
    assert fisher_greater(3, 3, 0, 3) == pytest.approx(1 / 20)
    assert fisher_greater(0, 3, 3, 3) == 1.0
    # 2 successes in group one of 4 and 0 in group two of 4: C(2,2) C(6,2) / C(8,4) = 15/70
    assert fisher_greater(2, 4, 0, 4) == pytest.approx(15 / 70)
    assert fisher_greater(1, 5, 0, 0) == 1.0


def test_claim_c_contrasts_search_before_and_after_weight_updates():
    flat = curves(whale=0.3, others=0.1)
    after = [step(64)] + [search(128, True)] * 4
    events = {"harness-only": [search(64, False)] * 4, "whale": after}
    claim = claim_c(study("math", flat, events))
    assert claim.verdict == "reproduced" and "4/4 search iterations accepted" in claim.measured[1]
    events["whale"] = [step(64), search(128, True), search(192, False)]  # 1/2 after vs 0/4 before
    assert claim_c(study("math", flat, events)).verdict == "inconclusive"
    helped = {**flat, "harness-only": [(0, 0.1), (300, 0.3), (600, 0.4)]}
    events["harness-only"] = [search(64, True)]
    assert claim_c(study("math", helped, events)).verdict == "not reproduced"
    events = {"harness-only": [search(64, False)], "whale": [step(64), search(128, False)]}
    assert claim_c(study("math", flat, events)).verdict == "inconclusive"


def test_weight_step_table_averages_each_algorithms_metrics_over_its_steps():
    def algo_step(algorithm: str, kept: int, loss: float, **metrics: float | None) -> dict[str, Any]:
        return {
            **step(64),
            "algorithm": algorithm,
            "kept": kept,
            "examples": 2 * kept,
            "train_reward": 0.25,
            "loss": loss,
            "dropped_tasks": 1,
            **metrics,
        }

    curve = [(0, 0.1), (64, 0.2)]
    events = {
        "whale": [algo_step("rft", 10, 1.0, kl=0.0), algo_step("rft", 20, 3.0, kl=0.2)],
        "whale+dpo": [algo_step("dpo", 8, 0.6931, kl=0.0, margin=0.0), algo_step("dpo", 12, 0.5, margin=0.4)],
        "whale+grpo": [
            algo_step("grpo", 30, -0.1, mean_abs_advantage=0.8, kl=None),
            algo_step("grpo", 0, float("nan"), mean_abs_advantage=None),  # nothing to train on
        ],
    }
    table = "\n".join(section_weight_steps(study("math-algorithms", dict.fromkeys(events, curve), events)))
    assert "| whale | rft | 2 | 0.250 | 15.0 / 64 | 30.0 | 2 | +2.0000 | +0.1000 | - | - |" in table
    assert "| whale+dpo | dpo | 2 | 0.250 | 10.0 / 64 | 20.0 | 2 | +0.5966 | +0.0000 | +0.2000 | - |" in table
    assert "| whale+grpo | grpo | 2 | 0.250 | 15.0 / 64 | 30.0 | 2 | -0.1000 | - | - | +0.8000 |" in table


def test_committed_results_md_is_what_the_committed_summaries_render(tmp_path):
    """docs/results.md must be regenerated whenever a summary changes (no hand edits)."""
    docs = tmp_path / "docs"
    (docs / "results").mkdir(parents=True)
    if (DOCS / "results").is_dir():
        shutil.copytree(DOCS / "results", docs / "results", dirs_exist_ok=True)
    for png in (docs / "results").glob("*.png"):
        png.unlink()
    rendered = render(docs, docs / "results" / "discussion.md").read_text()
    assert rendered == (DOCS / "results.md").read_text()
    for png in (docs / "results").glob("*.png"):
        assert (DOCS / "results" / png.name).is_file(), f"docs/results/{png.name} is not committed"
    for s in STUDIES:
        summary = load_summary(DOCS, s)
        if summary is None:
            continue
        # every run spent the study's budget, short only by what fits no unit: less than a weight group or
        # than the costliest search iteration the run took (a race's next look may not fit what is left)
        group = load_config(s.preset, overrides=list(s.overrides)).rft.k
        for r in (r for rs in summary.runs.values() for r in rs):
            short = summary.meta["budget_rollouts"] - r.budget["train_rollouts"] - r.budget["search_rollouts"]
            search = [int(e.get("spent", 0)) for e in r.events if e["event"] == "search_iteration"]
            unit = max([group, *search])
            assert short < unit, f"{s.name}: {r.method} seed {r.seed} stopped {short} rollouts short"


@pytest.mark.slow
def test_a_study_is_summarized_and_rendered_from_its_run_folders(compared, tmp_path):
    out, _ = compared  # the six methods on the tiny preset, one seed
    tiny = Study(
        "math", "Math (tiny)", "tiny", SIX, seeds=1, overrides=("domain.name=math",), folder=out.name
    )
    docs = tmp_path / "docs"
    console = Console(record=True, width=200)
    path = run_study(tiny, out.parent, docs, console)
    assert console.export_text().count("finished run reused") == 6  # nothing re-run
    summary = load_summary(docs, tiny)
    table = read_json(out / "compare.json")
    rows = build_rows(summary.runs)
    for mine, theirs in zip(rows, table["rows"], strict=True):
        assert mine.best_test.mean == theirs["best_test"]["mean"]
        assert mine.selected_test.mean == theirs["selected_test"]["mean"]
        assert mine.rollouts == theirs["rollouts"]
    assert path.stat().st_size < 200_000  # a summary, not the traces
    text = render(docs).read_text()
    assert "## The paper's claims" in text and "| a |" in text and "| e |" in text
    assert (docs / "results" / "math.png").read_bytes()[:4] == b"\x89PNG"
    assert "## Multi-hop search QA\n\nNot run yet" in text
    assert "Bottleneck view (math)" in text


def test_results_command_refuses_an_unknown_study_in_one_line(tmp_path):
    assert_user_error(whale("results", "--study", "nope", "--docs", str(tmp_path)), "unknown study 'nope'")


def test_results_render_only_writes_the_document_without_runs(tmp_path):
    proc = whale("results", "--render-only", "--docs", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "results.md").read_text()
    assert text.count("Not run yet") >= 3 and "| a |" in text
