"""Commands that run and read experiments: `whale run`, `eval`, `compare`, `results`, `status`, `report`,
`domains`, `bench`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.syntax import Syntax
from rich.table import Table

from whale.cli.app import app, console, user_error
from whale.cli.harness_runs import domain_overrides, harness_source, run_harnesses, trace_lines
from whale.studies.bottleneck import measured_totals, measured_verdict


@app.command()
def run(
    preset: Annotated[str | None, typer.Option(help="Preset name: default (SmolLM2) or tiny.")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="YAML config file.")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override: key.sub=value (repeatable).")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Run directory (default runs/<name>).")] = None,
    resume: Annotated[Path | None, typer.Option(help="Continue the run in this directory.")] = None,
    domain_file: Annotated[
        Path | None, typer.Option("--domain-file", help="Your own domain: a Python file with make_domain().")
    ] = None,
) -> None:
    """Run a WHALE experiment: alternate RFT weight steps and harness search until the budget is spent."""
    from whale.core.config import load_config

    if resume is not None:
        from whale.run.rundir import CONFIG, RunDir

        if not (resume / CONFIG).is_file():
            raise user_error(f"--resume {resume}: no config.yaml there (not a whale run directory)")
        cfg = RunDir(resume).load_config()
        out_dir = resume
    else:
        overrides = list(set_ or [])
        if domain_file is not None:
            overrides += domain_overrides("", domain_file)
        cfg = load_config(preset, config, overrides)
        out_dir = out or Path("runs") / cfg.name
        if out_dir.exists() and not out_dir.is_dir():
            raise user_error(f"--out {out_dir}: a file, not a folder (name a new folder for the run)")
    verb = "resuming" if resume is not None else "run"
    console.print(
        f"[bold]whale[/bold] {verb} {cfg.name}: model={cfg.model.name} domain={cfg.domain.label} -> {out_dir}"
    )
    from whale.run.experiment import Experiment  # torch and transformers: after the config is known good
    from whale.run.preflight import busy_machine_here

    if busy := busy_machine_here():
        console.print(f"[yellow]{busy}[/yellow]")
    summary = Experiment(cfg, out_dir, console, resume=resume is not None).run()
    print_summary(summary, out_dir)
    _write_report(out_dir)


def _write_report(folder: Path) -> None:
    from whale.report.write import write_report

    console.print(f"report: {write_report(folder)}")


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(metavar="DIR", help="Run or comparison directory.")],
) -> None:
    """Write DIR/report.html: curves with phases shaded, RFT and search progress, lineage, the harness
    diff, the weight-vs-harness bottleneck view and cost; for a comparison, the method table too."""
    _write_report(run_dir)


@app.command("eval")
def eval_(
    harness: Annotated[Path, typer.Option(help="Harness file to score.")],
    domain: Annotated[str, typer.Option(help="Domain name.")] = "math",
    split: Annotated[str, typer.Option(help="train, search, val or test.")] = "test",
    k: Annotated[int, typer.Option(help="Samples per task.")] = 8,
    preset: Annotated[str | None, typer.Option(help="Preset for model, sampling and sizes.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override: key.sub=value.")] = None,
    domain_file: Annotated[Path | None, typer.Option("--domain-file", help="Your own domain file.")] = None,
    against: Annotated[
        Path | None, typer.Option(help="A second harness (e.g. the seed): the paired difference per task.")
    ] = None,
    rows: Annotated[Path | None, typer.Option(help="Write every rollout here (JSONL).")] = None,
    show_traces: Annotated[int, typer.Option(help="Print this many rollouts in full (calls, tools).")] = 0,
) -> None:
    """Score a harness under the configured model: mean@k with CI, pass@k, maj@k and the cost; with
    --against, both harnesses on the same tasks and per-call seeds, and their paired difference."""
    import time

    from whale.core.config import load_config
    from whale.core.files import append_jsonl
    from whale.core.hierarchical import sign_test
    from whale.core.stats import paired_difference, task_means
    from whale.harness import validate
    from whale.run.evaluation import score_rollouts

    cfg = load_config(preset, None, [*domain_overrides(domain, domain_file), *(set_ or [])])
    files = [harness, *([against] if against else [])]
    sources = {}
    for path in files:
        sources[path.stem if path.stem not in sources else str(path)] = source = harness_source(path)
        problems = validate.problems(source)
        if problems:
            raise user_error(f"{path}: {problems[0]}")
    if rows is not None and rows.exists():
        raise user_error(f"--rows {rows}: already exists (not overwritten)")
    start = time.monotonic()
    label = f"{len(files)} harness(es) on {cfg.domain.label}/{split}"
    tasks, by_name = run_harnesses(cfg, sources, split, k, label)
    for path, rollouts in zip(files, by_name.values(), strict=True):
        score = score_rollouts(rollouts, tasks)
        console.print(
            f"{path.name} on {cfg.domain.label}/{split} ({len(tasks)} tasks, k={k}, model {cfg.model.name}): "
            f"mean@{k} {score.mean:.3f} [{score.ci_low:.3f}, {score.ci_high:.3f}], "
            f"pass@{k} {score.pass_at_k:.3f}, maj@{k} {score.maj_at_k:.3f}, solved {score.solved:.3f}"
        )
    every = [r for rollouts in by_name.values() for r in rollouts]
    for rollout in every[:show_traces]:
        console.print("\n".join(trace_lines(rollout)), highlight=False, markup=False)
    console.print(
        f"cost: {len(every)} rollouts, {sum(len(r.calls) for r in every)} model calls, "
        f"{sum(r.generated_tokens for r in every)} generated tokens, {time.monotonic() - start:.1f}s; "
        f"{sum(r.error is not None for r in every)} rollouts ended in an error"
    )
    if against is not None:
        mine, theirs = (task_means((r.task_id, r.reward) for r in rs) for rs in by_name.values())
        ids = [t.id for t in tasks]
        diff = paired_difference([mine[t] for t in ids], [theirs[t] for t in ids])
        up, down = sum(mine[t] > theirs[t] for t in ids), sum(mine[t] < theirs[t] for t in ids)
        console.print(
            f"{harness.name} - {against.name}: mean@{k} {diff.mean_diff:+.3f} [{diff.ci_low:+.3f}, "
            f"{diff.ci_high:+.3f}] (paired over {len(ids)} tasks, bootstrap 95% CI); better on {up} tasks, "
            f"worse on {down}, sign test p {sign_test(up, down):.4f}"
        )
    if rows is not None:
        append_jsonl(rows, [r.to_json() for r in every])
        console.print(f"rollouts written to {rows}")


@app.command()
def compare(
    domain: Annotated[str | None, typer.Option(help="Domain name (default: the preset's).")] = None,
    methods: Annotated[
        str, typer.Option(help="Comma-separated methods; the first is the reference of paired differences.")
    ] = "whale,whale-adaptive,weight-only,harness-only,stagewise,fast-slow",
    seeds: Annotated[int, typer.Option(help="Runs per method, with seeds seed, seed+1, ...")] = 1,
    preset: Annotated[str | None, typer.Option(help="Preset name: default (SmolLM2) or tiny.")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="YAML config file.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override: key.sub=value.")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Comparison directory (default runs/compare-<name>).")
    ] = None,
    domain_file: Annotated[Path | None, typer.Option("--domain-file", help="Your own domain file.")] = None,
) -> None:
    """Run every method on the same budget, splits and eval cadence; print and write the table and plot."""
    from whale.core.config import load_config
    from whale.studies.compare import compare as run_compare
    from whale.studies.compare import parse_methods

    chosen = parse_methods(methods)
    overrides = domain_overrides(domain, domain_file) if domain or domain_file else []
    cfg = load_config(preset, config, [*overrides, *(set_ or [])])
    out_dir = out or Path("runs") / f"compare-{cfg.name}-{cfg.domain.name}"
    console.print(
        f"[bold]whale compare[/bold]: {', '.join(chosen)} x {seeds} seed(s) on {cfg.domain.name}, "
        f"{cfg.schedule.budget_rollouts} rollouts each -> {out_dir}"
    )
    run_compare(cfg, chosen, seeds, out_dir, console)
    _write_report(out_dir)


@app.command()
def results(
    runs: Annotated[Path, typer.Option(help="Where the studies' run folders go (resumed, reused).")] = Path(
        "runs/results"
    ),
    docs: Annotated[Path, typer.Option(help="Docs folder: results/<study>.json and results.md.")] = Path(
        "docs"
    ),
    study: Annotated[
        list[str] | None, typer.Option("--study", help="Only this study (repeatable); default: all.")
    ] = None,
    render_only: Annotated[
        bool, typer.Option("--render-only", help="Only re-render results.md from the summaries.")
    ] = False,
    mixed_commits: Annotated[
        bool, typer.Option("--mixed-commits", help="Accept a study whose runs ran at different commits.")
    ] = False,
    plan: Annotated[
        bool,
        typer.Option("--plan", help="Print the compute plan (runs done, hours done and left); run nothing."),
    ] = False,
    jobs: Annotated[
        int, typer.Option("--jobs", min=1, help="Runs at a time, each with its share of the cores.")
    ] = 1,
    smoke_check: Annotated[
        bool,
        typer.Option(
            "--smoke", help="Run each distinct run of the studies once, tiny (into RUNS/../smoke), and stop."
        ),
    ] = False,
) -> None:
    """Run every study behind docs/results.md (each a `whale compare`), summarize it, render the document."""
    from whale.studies.compute import section_plan
    from whale.studies.plan import select_studies
    from whale.studies.pool import run_pool
    from whale.studies.results import render
    from whale.studies.running import run_study

    chosen = select_studies(study)
    if plan:
        console.print("\n".join(section_plan(docs, tuple(chosen))), markup=False)
        return
    if smoke_check:
        from whale.studies.smoke import smoke

        checked = smoke(chosen, docs, runs.parent / "smoke", console)
        failed = [run for run, status in checked if status != "ok"]
        console.print(f"smoke: {len(checked) - len(failed)} of {len(checked)} distinct runs finished")
        raise typer.Exit(1 if failed else 0)
    if jobs > 1 and not render_only:
        run_pool(chosen, runs, docs, console, jobs, mixed_commits)
    elif not render_only:
        for s in chosen:
            console.print(
                f"[bold]study {s.name}[/bold]: {s.preset}, {', '.join(s.methods)} x {s.seeds} seeds"
            )
            console.print(f"summary written to {run_study(s, runs, docs, console, mixed_commits)}")
    path = render(docs, docs / "results" / "discussion.md")
    console.print(f"rendered {path}")


@app.command()
def status(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="Run or comparison directory.")],
) -> None:
    """Where a run stands (running, stopped or finished; budget, phase, last evaluation), from its files."""
    from whale.run.status import status_lines

    for line in status_lines(run_dir):
        console.print(line, highlight=False)


@app.command()
def bench(
    model: Annotated[str, typer.Option(help="embedded, tiny, or a model folder.")] = "embedded",
    out: Annotated[Path, typer.Option(help="Where bench.json goes.")] = Path("bench/results"),
    quick: Annotated[bool, typer.Option(help="Small sizes: a smoke run in well under a minute.")] = False,
    end_to_end: Annotated[
        str | None,
        typer.Option(
            help="Instead: `whale run --preset default` per engine kind[:dtype], e.g. fast,vllm:bfloat16."
        ),
    ] = None,
) -> None:
    """Engine vs transformers.generate and the matmul roofline, trainer vs a Hugging Face baseline, rollout
    pipeline and the rollout workload per engine, peak memory: side by side in one run, with ratios
    (docs/performance.md). With --end-to-end: whole runs per engine kind, their wall split into parts."""
    if end_to_end:
        from whale.bench.end_to_end import bench_end_to_end, parse_variants

        kinds = parse_variants(end_to_end)
        bench_end_to_end(kinds, out / "end-to-end.json", log=lambda m: console.print(m, highlight=False))
        console.print(f"bench: {out / 'end-to-end.json'}")
        return
    from whale.bench.suite import run_bench

    run_bench(model, out, quick, console)


def print_summary(summary: dict, out_dir: Path) -> None:
    table = Table(title="evaluation points")
    for col in (
        "point",
        "label",
        "weights",
        "harness",
        "rollouts",
        "val mean@k [95% CI]",
        "test mean@k [95% CI]",
    ):
        table.add_column(col)
    for p in summary["points"]:
        v, t = p["val"], p["test"]
        table.add_row(
            str(p["point"]), p["label"], p["weights"], p["harness"], str(p["rollouts"]),
            f"{v['mean']:.3f} [{v['ci_low']:.3f}, {v['ci_high']:.3f}]",
            f"{t['mean']:.3f} [{t['ci_low']:.3f}, {t['ci_high']:.3f}]",
        )  # fmt: skip
    console.print(table)
    before, after = summary["before"], summary["after"]
    console.print(
        f"test mean@k: before {before['mean']:.3f} [{before['ci_low']:.3f}, {before['ci_high']:.3f}] -> "
        f"after {after['mean']:.3f} [{after['ci_low']:.3f}, {after['ci_high']:.3f}]"
    )
    bt, sv = summary["best_test"], summary["test_at_best_val"]
    console.print(f"best test mean@k {bt['mean']:.3f} (point {bt['point']}); "
                  f"test at best-validation checkpoint {sv['mean']:.3f} (point {sv['point']})")  # fmt: skip
    b = summary["budget"]
    console.print(
        f"budget: {b['train_rollouts'] + b['search_rollouts']} rollouts ({b['train_rollouts']} train, "
        f"{b['search_rollouts']} search; {b['eval_rollouts']} eval not charged), "
        f"{b['model_calls']} model calls, "
        f"{b['generated_tokens']} tokens, {b['wall_s']:.0f}s"
    )
    gains = summary.get("search_gains") or {}
    if gains.get("start") is not None:
        accepted = ", ".join(f"{a['candidate']} {a['gain']:+.3f}" for a in gains["accepted"]) or "none"
        console.print(
            f"search-split score {gains['start']:.3f} -> {gains['end']:.3f}: "
            f"weights {gains['weights']:+.3f}, harness {gains['harness']:+.3f} (accepted: {accepted})"
        )
    totals = measured_totals(summary["points"])
    if totals is not None:
        k = summary.get("k") or 1
        console.print(f"bottleneck, measured on val: {measured_verdict(totals, k)}", highlight=False)
    if summary["harness_diff"]:
        console.print(f"[bold]accepted harness {summary['final_harness']} vs seed:[/bold]")
        console.print(Syntax(summary["harness_diff"], "diff", word_wrap=True))
    else:
        console.print("harness: the seed was kept (no challenger passed the acceptance rule)")
    console.print(f"written to {out_dir}/ (summary.json, evals.jsonl, events.jsonl, search/, checkpoints/)")
