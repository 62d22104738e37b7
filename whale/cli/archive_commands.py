"""Commands that read harnesses: `whale archive show|diff` and `whale harness check`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.syntax import Syntax
from rich.table import Table

from whale.cli.app import archive_app, console, harness_app, user_error
from whale.cli.harness_runs import domain_overrides, harness_source, run_harness


def _open_archive(run_dir: Path):  # noqa: ANN202 - Archive, imported lazily
    from whale.search.archive import Archive

    root = run_dir / "search"
    if not (root / "candidates").is_dir():
        raise user_error(f"{run_dir}: no harness archive there (expected {root}/candidates)")
    return Archive(root)


@archive_app.command("show")
def archive_show(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="Run directory.")],
    candidate: Annotated[str | None, typer.Argument(help="Candidate id, e.g. c0003.")] = None,
    failing: Annotated[int, typer.Option(help="Failing tasks to show with trace excerpts.")] = 5,
) -> None:
    """Without CANDIDATE: every candidate with status, score and hypothesis. With it: its record, its
    scores and failures by kind under each weights version, its failing tasks with what the model said,
    and its code."""
    from whale.search.diagnosis import describe

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
        raise user_error(f"{candidate}: not in {run_dir}/search (candidates: {', '.join(archive.ids())})")
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
        if ev.rollouts:
            console.print(f"  {describe(ev.failures, ev.rollouts)}", highlight=False)
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
            raise user_error(f"{cid}: not in {run_dir}/search")
    diff = difflib.unified_diff(
        archive.load(a).source.splitlines(True), archive.load(b).source.splitlines(True), f"{a}/harness.py",
        f"{b}/harness.py",
    )  # fmt: skip
    text = "".join(diff)
    console.print(Syntax(text, "diff", word_wrap=True) if text else f"{a} and {b} hold the same code")


@harness_app.command("check")
def harness_check(
    file: Annotated[Path, typer.Argument(help="Harness file.")],
    domain: Annotated[str, typer.Option(help="Domain name.")] = "math",
    model: Annotated[str, typer.Option(help="Model for the smoke test (tiny is fast).")] = "tiny",
    tasks: Annotated[int, typer.Option(help="Smoke-test tasks.")] = 2,
    domain_file: Annotated[Path | None, typer.Option("--domain-file", help="Your own domain file.")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override, e.g. domain.options.path=p.pgn (repeatable).")
    ] = None,
) -> None:
    """Static validation, then a smoke test in the sandbox; says exactly what is wrong."""
    from whale.core.config import load_config
    from whale.harness import validate

    source = harness_source(file)
    problems = validate.problems(source)
    if problems:
        for p in problems:
            console.print(f"{file}: {p}")
        raise typer.Exit(1)
    console.print(f"{file}: static checks passed")
    overrides = [*domain_overrides(domain, domain_file), f"model.name={model}", *(set_ or [])]
    cfg = load_config("tiny", None, overrides)
    _, smoke = run_harness(cfg, file.stem, source, "search", 1, "smoke test", limit=tasks)
    failed = [r for r in smoke if r.error]
    for r in smoke:
        status = f"error: {r.error}" if r.error else f"answer {r.answer!r}, reward {r.reward}"
        console.print(
            f"  smoke {r.task_id}: {len(r.calls)} model calls, {len(r.tool_calls)} tool calls, {status}"
        )
    if failed:
        raise typer.Exit(1)
    console.print(f"{file}: smoke test passed on {len(smoke)} tasks")


@harness_app.command("seed")
def harness_seed(
    domain: Annotated[str, typer.Option(help="Domain name.")] = "math",
    domain_file: Annotated[Path | None, typer.Option("--domain-file", help="Your own domain file.")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a domain setting (repeatable).")
    ] = None,
) -> None:
    """Print the domain's seed harness (the one a run starts from), e.g. `whale harness seed > seed.py`."""
    from whale.core.config import load_config
    from whale.domains.registry import build_domain

    cfg = load_config("tiny", None, [*domain_overrides(domain, domain_file), *(set_ or [])])
    sys.stdout.write(build_domain(cfg.domain, load=False).seed_harness())
