"""Commands that ship a run's agents: `whale agents`, `export`, `agent`, `serve`, `diff`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.syntax import Syntax
from rich.table import Table

from whale.cli.app import app, console, user_error

ENGINE_HELP = "Answer on this engine (auto, fast, hf, vllm) instead of the run's; fast skips vLLM's start-up."


def _ci(score: dict) -> str:
    return f"{score['mean']:.3f} [{score['ci_low']:.3f}, {score['ci_high']:.3f}]"


@app.command()
def agents(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="Run directory.")],
) -> None:
    """Every agent version of a run (one per evaluation point: weights version + harness id) with its
    scores, rollouts spent and phase, whether its weights are still on disk, and the run's disk use."""
    from whale.deploy.versions import agent_versions, best_version
    from whale.run.disk import storage_line
    from whale.run.rundir import RunDir

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
    console.print(storage_line(run_dir, RunDir(run_dir).read_state()), highlight=False)


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
        raise user_error(f"--out {out}: already exists (a bundle is written to a new folder)")
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
            raise user_error(f"--input {text}: file not found")
        text = path.read_text()
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise user_error(f"--input: invalid JSON ({str(exc).splitlines()[0][:120]})") from None


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
    engine: Annotated[str | None, typer.Option(help=ENGINE_HELP)] = None,
) -> None:
    """Run the bundled agent on one task and print its answer as JSON (exit 1 when the rollout failed)."""
    import json

    from whale.deploy.agent import load_agent, task_from_inputs

    if (input_ is None) == (task is None):
        raise user_error("give one of --input JSON or --task ID")
    inputs = None if input_ is None else _task_inputs(input_)
    try:
        chosen = None if inputs is None else task_from_inputs(inputs, "--input")
        with load_agent(bundle, temperature, engine) as agent:
            answer = agent(chosen or agent.domain_task(task))
    except ValueError as exc:
        raise user_error(str(exc)) from None
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
    engine: Annotated[str | None, typer.Option(help=ENGINE_HELP)] = None,
) -> None:
    """Serve the bundled agent over HTTP on 127.0.0.1: POST /run with {"inputs": {...}} or
    {"task_id": ...}, GET /health. Concurrent requests are batched through one engine."""
    from whale.deploy.serve import serve

    serve(bundle, port, temperature, lambda line: console.print(line, highlight=False), engine)


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
