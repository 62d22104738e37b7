"""The `whale` command line. Errors a user can cause print one line and exit 2 (tracebacks with --debug)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

if TYPE_CHECKING:
    from whale.core.config import Config

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Weight-Harness Alternating LEarning.")
# Long paths and verdicts stay on one line when piped, and tables get room instead of rich's 80 columns.
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False) -> None:
    app.debug = debug  # type: ignore[attr-defined]


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
    from whale.run.experiment import Experiment

    if resume is not None:
        import yaml

        from whale.core.config import config_from_dict

        cfg_path = resume / "config.yaml"
        if not cfg_path.is_file():
            raise _user_error(f"--resume {resume}: no config.yaml there (not a whale run directory)")
        cfg = config_from_dict(yaml.safe_load(cfg_path.read_text()), str(cfg_path))
        out_dir = resume
    else:
        overrides = list(set_ or [])
        if domain_file is not None:
            overrides += _domain_overrides("", domain_file)
        cfg = load_config(preset, config, overrides)
        out_dir = out or Path("runs") / cfg.name
    console.print(
        f"[bold]whale[/bold] {cfg.name}: model={cfg.model.name} domain={cfg.domain.name} -> {out_dir}"
    )
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


@app.command()
def domains() -> None:
    """List the domains this installation can run, with their default split sizes."""
    from whale.core.config import DomainConfig
    from whale.domains.registry import available, build_domain

    table = Table(title="domains")
    for col in ("name", "source", "train", "search", "val", "test", "about"):
        table.add_column(col)
    for name, target in sorted(available().items()):
        domain = build_domain(DomainConfig(name=name))
        sizes = {k: str(len(v)) for k, v in domain.splits().items()}
        about = domain.brief.strip().splitlines()[0][:60]
        table.add_row(name, target, sizes["train"], sizes["search"], sizes["val"], sizes["test"], about)
    console.print(table)


def _domain_overrides(name: str, file: Path | None) -> list[str]:
    """Config overrides selecting a built-in domain, or a user's domain file (whose stem names it)."""
    if file is None:
        return [f"domain={name}"]
    return [f"domain={file.stem}", f"domain.file={file}"]


def _run_harness(
    cfg: Config, name: str, source: str, split: str, k: int, label: str, limit: int | None = None
) -> tuple[list, list]:
    """Build domain, model and runner from `cfg`; run k rollouts of the harness on each task of `split`."""
    from whale.core.progress import track
    from whale.domains.registry import build_domain
    from whale.harness.records import HarnessCandidate
    from whale.harness.runner import RolloutJob
    from whale.model.loading import load_model
    from whale.rollout.build import build_executor

    dom = build_domain(cfg.domain)
    splits = dom.splits()
    if split not in splits:
        raise _user_error(f"--split {split}: expected one of {', '.join(splits)}")
    tasks = splits[split][:limit]
    model, tokenizer = load_model(cfg.model.name, cfg.seed)
    runner = build_executor(cfg, model, tokenizer, dom, weights=None)
    candidate = HarnessCandidate(name, source)
    try:
        with track(console, label, len(tasks) * k) as tick:
            rollouts = runner.run([RolloutJob(t, candidate, s) for t in tasks for s in range(k)], tick)
    finally:
        runner.close()
    return tasks, rollouts


def _harness_source(path: Path) -> str:
    if not path.is_file():
        raise _user_error(f"harness file not found: {path}")
    return path.read_text()


@app.command("eval")
def eval_(
    harness: Annotated[Path, typer.Option(help="Harness file to score.")],
    domain: Annotated[str, typer.Option(help="Domain name.")] = "math",
    split: Annotated[str, typer.Option(help="train, search, val or test.")] = "test",
    k: Annotated[int, typer.Option(help="Samples per task.")] = 8,
    preset: Annotated[str | None, typer.Option(help="Preset for model, sampling and sizes.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override: key.sub=value.")] = None,
    domain_file: Annotated[Path | None, typer.Option("--domain-file", help="Your own domain file.")] = None,
) -> None:
    """Score a harness under the configured model: mean@k with CI, pass@k, maj@k and the cost."""
    import time

    from whale.core.config import load_config
    from whale.harness import validate
    from whale.run.experiment import score_rollouts

    cfg = load_config(preset, None, [*_domain_overrides(domain, domain_file), *(set_ or [])])
    source = _harness_source(harness)
    problems = validate.problems(source)
    if problems:
        raise _user_error(f"{harness}: {problems[0]}")
    start = time.monotonic()
    tasks, rollouts = _run_harness(cfg, harness.stem, source, split, k, f"{harness.name} on {domain}/{split}")
    score = score_rollouts(rollouts, tasks)
    errors = sum(r.error is not None for r in rollouts)
    console.print(
        f"{harness.name} on {domain}/{split} ({len(tasks)} tasks, k={k}, model {cfg.model.name}): "
        f"mean@{k} {score.mean:.3f} [{score.ci_low:.3f}, {score.ci_high:.3f}], "
        f"pass@{k} {score.pass_at_k:.3f}, maj@{k} {score.maj_at_k:.3f}"
    )
    console.print(
        f"cost: {len(rollouts)} rollouts, {sum(len(r.calls) for r in rollouts)} model calls, "
        f"{sum(r.generated_tokens for r in rollouts)} generated tokens, {time.monotonic() - start:.1f}s; "
        f"{errors} rollouts ended in an error"
    )


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
    overrides = _domain_overrides(domain, domain_file) if domain or domain_file else []
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
) -> None:
    """Run every study behind docs/results.md (each a `whale compare`), summarize it, render the document."""
    from whale.studies.plan import select_studies
    from whale.studies.results import render, run_study

    chosen = select_studies(study)
    if not render_only:
        for s in chosen:
            console.print(
                f"[bold]study {s.name}[/bold]: {s.preset}, {', '.join(s.methods)} x {s.seeds} seeds"
            )
            console.print(f"summary written to {run_study(s, runs, docs, console)}")
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
) -> None:
    """Engine vs transformers.generate and the matmul roofline, trainer vs a Hugging Face baseline, rollout
    pipeline vs bare engine time, peak memory: side by side in one run, with ratios (docs/performance.md)."""
    from whale.bench.main import run_bench

    run_bench(model, out, quick, console)


def _ci(score: dict) -> str:
    return f"{score['mean']:.3f} [{score['ci_low']:.3f}, {score['ci_high']:.3f}]"


@app.command()
def agents(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="Run directory.")],
) -> None:
    """Every agent version of a run (one per evaluation point: weights version + harness id) with its
    scores, rollouts spent and phase, whether its weights are still on disk, and the run's disk use."""
    from whale.core.files import read_json
    from whale.deploy.versions import agent_versions, best_version
    from whale.run.disk import storage_line

    versions = agent_versions(run_dir)
    best = best_version(versions).point if versions else None
    table = Table(title=f"{run_dir}: {len(versions)} agent versions")
    k = versions[0].test["k"] if versions else "k"
    for col in ("version", "point", "label", "phase", "rollouts", f"val mean@{k} [95% CI]",
                f"test mean@{k} [95% CI]", "weights", ""):  # fmt: skip
        table.add_column(col)
    for v in versions:
        weights = "-" if v.missing else v.checkpoint or "base model"
        table.add_row(v.id, str(v.point), v.label, v.phase, str(v.rollouts), _ci(v.val), _ci(v.test),
                      weights, "best val" if v.point == best else "")  # fmt: skip
    console.print(table)
    for v in versions:
        if v.missing:
            console.print(f"{v.id} (point {v.point}) cannot be exported: {v.missing}", highlight=False)
    console.print(storage_line(run_dir, read_json(run_dir / "state.json")), highlight=False)


@app.command("export")
def export(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="Run directory.")],
    out: Annotated[Path, typer.Option(help="The bundle folder to create (must not exist).")],
    version: Annotated[
        str | None, typer.Option(help="Agent version id, e.g. w3-c0001 (`whale agents`).")
    ] = None,
    best: Annotated[str | None, typer.Option(help="'val': the best version by validation (default).")] = None,
    adapter: Annotated[
        bool,
        typer.Option(help="Store the base model's reference + the LoRA adapter instead of merged weights."),
    ] = False,
) -> None:
    """Write one agent version as a self-contained bundle: weights, harness, domain tools configuration,
    per-task scores, a manifest with the sha256 of every file, and a README."""
    from whale.deploy.bundle import export_bundle
    from whale.deploy.versions import select_version
    from whale.run.disk import folder_bytes, human_bytes

    chosen = select_version(run_dir, version, best)
    if out.exists():
        raise _user_error(f"--out {out}: already exists (a bundle is written to a new folder)")
    manifest = export_bundle(run_dir, chosen, out, adapter)
    console.print(
        f"exported agent {chosen.id} (point {chosen.point}: val {_ci(chosen.val)}, test {_ci(chosen.test)}) "
        f"-> {out}: {manifest['weights_format']} weights, {len(manifest['files'])} files, "
        f"{human_bytes(folder_bytes(out))}",
        highlight=False,
    )


def _task_inputs(text: str) -> object:
    """--input: JSON text, or @file holding it."""
    import json

    if text.startswith("@"):
        path = Path(text[1:])
        if not path.is_file():
            raise _user_error(f"--input {text}: file not found")
        text = path.read_text()
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _user_error(f"--input: invalid JSON ({str(exc).splitlines()[0][:120]})") from None


@app.command("agent")
def agent_(
    bundle: Annotated[Path, typer.Argument(metavar="BUNDLE", help="An exported agent bundle.")],
    input_: Annotated[
        str | None, typer.Option("--input", help="Task inputs as a JSON object, or @file.json.")
    ] = None,
    task: Annotated[
        str | None, typer.Option(help="Instead: a task id of the bundle's domain (gets a reward).")
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(help="Override the run's sampling temperature.")
    ] = None,
    trace: Annotated[bool, typer.Option(help="Include the full trace (model and tool calls).")] = False,
) -> None:
    """Run the bundled agent on one task and print its answer as JSON (exit 1 when the rollout failed)."""
    import json

    from whale.deploy.agent import load_agent, task_from_inputs

    if (input_ is None) == (task is None):
        raise _user_error("give one of --input JSON or --task ID")
    inputs = None if input_ is None else _task_inputs(input_)
    try:
        chosen = None if inputs is None else task_from_inputs(inputs, "--input")
        with load_agent(bundle, temperature) as agent:
            answer = agent(chosen or agent.domain_task(task))
    except ValueError as exc:
        raise _user_error(str(exc)) from None
    print(json.dumps(answer.to_json(trace)))
    if answer.error:
        raise typer.Exit(1)


@app.command("serve")
def serve_(
    bundle: Annotated[Path, typer.Argument(metavar="BUNDLE", help="An exported agent bundle.")],
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 8000,
    temperature: Annotated[
        float | None, typer.Option(help="Override the run's sampling temperature.")
    ] = None,
) -> None:
    """Serve the bundled agent over HTTP on 127.0.0.1: POST /run with {"inputs": {...}} or
    {"task_id": ...}, GET /health. Concurrent requests are batched through one engine."""
    from whale.deploy.serve import serve

    serve(bundle, port, temperature, lambda line: console.print(line, highlight=False))


@app.command("diff")
def diff_(
    a: Annotated[Path, typer.Argument(metavar="BUNDLE_A", help="The reference bundle (production).")],
    b: Annotated[Path, typer.Argument(metavar="BUNDLE_B", help="The candidate bundle.")],
    split: Annotated[str, typer.Option(help="val or test: the scores to pair.")] = "test",
    top: Annotated[int, typer.Option(help="Tensors to list by weight change.")] = 5,
) -> None:
    """Harness diff, weight delta norms and the paired score difference B - A with its 95% CI."""
    from whale.deploy.diff import diff_bundles

    d = diff_bundles(a, b, split)
    console.print(f"A: agent {d.a['agent']} (point {d.a['point']} of {d.a['run']})", highlight=False)
    console.print(f"B: agent {d.b['agent']} (point {d.b['point']} of {d.b['run']})", highlight=False)
    if d.harness_diff:
        console.print("[bold]harness[/bold]:")
        console.print(Syntax(d.harness_diff, "diff", word_wrap=True))
    else:
        console.print(f"harness: identical code ({d.a['harness']} / {d.b['harness']})", highlight=False)
    moved = sum(t.norm > 0 for t in d.tensors)
    console.print(
        f"weights: ||B - A|| = {d.weights_total:.4g} ({d.weights_relative:.3g} of ||A||); "
        f"{moved} of {len(d.tensors)} tensors changed",
        highlight=False,
    )
    for t in d.tensors[:top] if moved else []:
        console.print(f"  {t.name}: {t.norm:.4g} ({t.relative:.3g} relative)", highlight=False)
    if d.scores is None:
        console.print(f"{split} scores: {d.scores_note}", highlight=False)
        return
    s, p = d.scores, d.scores.paired
    verdict = "significant" if s.significant else "not significant"
    console.print(
        f"{split} mean: A {s.mean_a:.3f}, B {s.mean_b:.3f}; B - A {p.mean_diff:+.3f} "
        f"[95% CI {p.ci_low:+.3f}, {p.ci_high:+.3f}] over {p.n_tasks} paired tasks: {verdict}",
        highlight=False,
    )


archive_app = typer.Typer(no_args_is_help=True, help="Browse a run's harness archive.")
app.add_typer(archive_app, name="archive")


def _open_archive(run_dir: Path):  # noqa: ANN202 - Archive, imported lazily
    from whale.search.archive import Archive

    root = run_dir / "search"
    if not (root / "candidates").is_dir():
        raise _user_error(f"{run_dir}: no harness archive there (expected {root}/candidates)")
    return Archive(root)


@archive_app.command("show")
def archive_show(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="Run directory.")],
    candidate: Annotated[str | None, typer.Argument(help="Candidate id, e.g. c0003.")] = None,
    failing: Annotated[int, typer.Option(help="Failing tasks to show with trace excerpts.")] = 5,
) -> None:
    """Without CANDIDATE: every candidate with status, score and hypothesis. With it: its record, its
    scores under each weights version, its failing tasks with what the model said, and its code."""
    archive = _open_archive(run_dir)
    if candidate is None:
        table = Table(title=f"{run_dir}/search: {len(archive.ids())} candidates")
        for col in (
            "id",
            "parent",
            "proposer",
            "status",
            "score",
            "weights",
            "tokens",
            "calls",
            "hypothesis",
        ):
            table.add_column(col)
        for cid in archive.ids():
            meta, history = archive.meta(cid), archive.eval_history(cid)
            scores = ["-"] * 4
            if history:
                last = history[-1]
                scores = [f"{last.mean:.3f}", last.weights_version, f"{last.tokens_per_rollout:.0f}",
                          f"{last.calls_per_rollout:.1f}"]  # fmt: skip
            table.add_row(cid, meta["parent"] or "-", meta["proposer"], meta["status"], *scores,
                          (meta["hypothesis"] or meta["reason"])[:60])  # fmt: skip
        console.print(table)
        return
    if candidate not in archive.ids():
        raise _user_error(f"{candidate}: not in {run_dir}/search (candidates: {', '.join(archive.ids())})")
    meta = archive.meta(candidate)
    console.print(f"[bold]{candidate}[/bold] parent={meta['parent']} proposer={meta['proposer']} "
                  f"status={meta['status']}")  # fmt: skip
    console.print(f"hypothesis: {meta['hypothesis']}")
    if meta["reason"]:
        console.print(f"reason: {meta['reason']}")
    history = archive.eval_history(candidate)
    for ev in history:
        solved = sum(v >= 1.0 for v in ev.per_task.values())
        console.print(f"under {ev.weights_version}: mean {ev.mean:.3f} ({solved}/{len(ev.per_task)} solved), "
                      f"{ev.tokens_per_rollout:.0f} tokens and {ev.calls_per_rollout:.1f} calls per rollout, "
                      f"{ev.errors} errors")  # fmt: skip
    if history:
        traces = [t for t in archive.traces(candidate, history[-1].weights_version) if t["reward"] < 1.0]
        console.print(f"[bold]failing rollouts under {history[-1].weights_version}[/bold]: {len(traces)}")
        for t in traces[:failing]:
            last_reply = t["calls"][-1]["text"] if t["calls"] else ""
            console.print(f"  {t['task_id']} reward {t['reward']}: answer {t['answer']!r}"
                          + (f", error {t['error']}" if t["error"] else "")
                          + f"; last reply {last_reply[:160]!r}")  # fmt: skip
    console.print(Syntax(archive.load(candidate).source, "python", line_numbers=True, word_wrap=True))


@archive_app.command("diff")
def archive_diff(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="Run directory.")],
    a: Annotated[str, typer.Argument(help="Base candidate id.")],
    b: Annotated[str, typer.Argument(help="Other candidate id.")],
) -> None:
    """Unified diff between two candidates' code."""
    import difflib

    archive = _open_archive(run_dir)
    for cid in (a, b):
        if cid not in archive.ids():
            raise _user_error(f"{cid}: not in {run_dir}/search")
    diff = difflib.unified_diff(
        archive.load(a).source.splitlines(True), archive.load(b).source.splitlines(True), f"{a}/harness.py",
        f"{b}/harness.py",
    )  # fmt: skip
    text = "".join(diff)
    console.print(Syntax(text, "diff", word_wrap=True) if text else f"{a} and {b} hold the same code")


harness_app = typer.Typer(no_args_is_help=True, help="Work with harness files.")
app.add_typer(harness_app, name="harness")


@harness_app.command("check")
def harness_check(
    file: Annotated[Path, typer.Argument(help="Harness file.")],
    domain: Annotated[str, typer.Option(help="Domain name.")] = "math",
    model: Annotated[str, typer.Option(help="Model for the smoke test (tiny is fast).")] = "tiny",
    tasks: Annotated[int, typer.Option(help="Smoke-test tasks.")] = 2,
    domain_file: Annotated[Path | None, typer.Option("--domain-file", help="Your own domain file.")] = None,
) -> None:
    """Static validation, then a smoke test in the sandbox; says exactly what is wrong."""
    from whale.core.config import load_config
    from whale.harness import validate

    source = _harness_source(file)
    problems = validate.problems(source)
    if problems:
        for p in problems:
            console.print(f"{file}: {p}")
        raise typer.Exit(1)
    console.print(f"{file}: static checks passed")
    cfg = load_config("tiny", None, [*_domain_overrides(domain, domain_file), f"model.name={model}"])
    _, smoke = _run_harness(cfg, file.stem, source, "search", 1, "smoke test", limit=tasks)
    failed = [r for r in smoke if r.error]
    for r in smoke:
        status = f"error: {r.error}" if r.error else f"answer {r.answer!r}, reward {r.reward}"
        console.print(
            f"  smoke {r.task_id}: {len(r.calls)} model calls, {len(r.tool_calls)} tool calls, {status}"
        )
    if failed:
        raise typer.Exit(1)
    console.print(f"{file}: smoke test passed on {len(smoke)} tasks")


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
    if summary["harness_diff"]:
        console.print(f"[bold]accepted harness {summary['final_harness']} vs seed:[/bold]")
        console.print(Syntax(summary["harness_diff"], "diff", word_wrap=True))
    else:
        console.print("harness: the seed was kept (no challenger passed the paired significance test)")
    console.print(f"written to {out_dir}/ (summary.json, evals.jsonl, events.jsonl, search/, checkpoints/)")


def _user_error(message: str) -> Exception:
    from whale.core.config import ConfigError

    return ConfigError(message)


def main() -> None:
    from whale.core.config import ConfigError
    from whale.core.openai_http import EndpointError
    from whale.harness.validate import HarnessInvalid
    from whale.model.loading import ModelLoadError

    sys.stdout.reconfigure(line_buffering=True)  # progress lines appear promptly when piped to a file
    try:
        app()
    except (ConfigError, ModelLoadError, HarnessInvalid, FileNotFoundError) as exc:
        if "--debug" in sys.argv:
            raise
        print(f"whale: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:  # a full disk, a read-only folder: the run's last commit is intact
        if "--debug" in sys.argv:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"whale: error: {where}{exc.strerror or exc} (fix it, then `whale run --resume <run dir>`)",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
    except EndpointError as exc:  # a remote engine gave up after its retries; the last commit is intact
        if "--debug" in sys.argv:
            raise
        print(f"whale: error: remote engine: {exc} (then `whale run --resume <run dir>`)", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("whale: interrupted; resume with `whale run --resume <run dir>`", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
