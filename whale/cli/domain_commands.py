"""Commands about domains: `whale domains` lists what this installation can run, `whale gym-scores` scores
the seed harness on reasoning-gym datasets so that a study can pick families by a stated rule."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from whale.cli.app import app, console, user_error
from whale.cli.harness_runs import run_harnesses


@app.command()
def domains(
    domain_file: Annotated[
        Path | None, typer.Option("--domain-file", help="Also check your own domain file.")
    ] = None,
) -> None:
    """List the domains this installation can run, with their default split sizes."""
    from whale.core.config import ConfigError, DomainConfig
    from whale.domains.registry import available, build_domain

    table = Table(title="domains")
    for col in ("name", "source", "train", "search", "val", "test", "about"):
        table.add_column(col)
    found = {name: (target, DomainConfig(name=name)) for name, target in sorted(available().items())}
    if domain_file is not None:
        found[domain_file.stem] = (
            str(domain_file),
            DomainConfig(name=domain_file.stem, file=str(domain_file)),
        )
    for name, (target, config) in found.items():
        try:
            domain = build_domain(config)
        except ConfigError as exc:
            table.add_row(name, target, "-", "-", "-", "-", f"not available: {exc}"[:90])
            continue
        sizes = {k: str(len(v)) for k, v in domain.splits().items()}
        about = domain.brief.strip().splitlines()[0][:60]
        table.add_row(name, target, sizes["train"], sizes["search"], sizes["val"], sizes["test"], about)
    console.print(table)
    try:
        from whale.domains.gym import UNSUPPORTED, gym_datasets

        names = gym_datasets()
    except ImportError:
        return
    supported = [n for n in names if n not in UNSUPPORTED]
    console.print(f"reasoning-gym datasets ({len(supported)} supported; domain.options.dataset=NAME):")
    console.print(", ".join(supported), highlight=False)
    for name, reason in sorted(UNSUPPORTED.items()):
        console.print(f"  not supported: {name}: {reason}", highlight=False)


@app.command("gym-scores")
def gym_scores(
    datasets: Annotated[
        str | None,
        typer.Option(help="Comma-separated reasoning-gym datasets (default: every supported one)."),
    ] = None,
    preset: Annotated[str | None, typer.Option(help="Preset for model and sampling.")] = "default",
    k: Annotated[int, typer.Option(help="Samples per task.")] = 4,
    tasks: Annotated[int, typer.Option(help="Test tasks per dataset.")] = 16,
    low: Annotated[float, typer.Option(help="Lower end of the range a study picks from.")] = 0.02,
    high: Annotated[float, typer.Option(help="Upper end of that range.")] = 0.40,
    out: Annotated[
        Path | None,
        typer.Option(
            help="JSON file of the scores, written after each dataset; datasets already in it are kept."
        ),
    ] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override: key.sub=value.")] = None,
) -> None:
    """The seed harness's test mean@k on each reasoning-gym dataset under the configured model, so that a
    study can pick families by a rule ("between 0.02 and 0.40": off the floor, not already solved)."""
    from whale.core.config import ConfigError, load_config
    from whale.core.files import atomic_write_json
    from whale.core.provenance import code_version
    from whale.domains.gym import UNSUPPORTED, ReasoningGymDomain, gym_datasets
    from whale.model.loading import load_model
    from whale.run.evaluation import score_rollouts

    try:
        import reasoning_gym  # noqa: F401
    except ImportError:
        raise user_error("gym-scores: reasoning-gym is not installed: pip install 'whale[gym]'") from None
    names = (
        [n.strip() for n in datasets.split(",")]
        if datasets
        else [n for n in gym_datasets() if n not in UNSUPPORTED]
    )
    rows = gym_rows(out, tasks, k)
    loaded = None  # the model, loaded once for every dataset
    for name in names:
        if name in rows:
            continue
        sizes = f"domain.sizes={{train: 1, search: 1, val: 1, test: {tasks}}}"
        overrides = ["domain=reasoning-gym", f"domain.options.dataset={name}", sizes, *(set_ or [])]
        try:
            cfg = load_config(preset, None, overrides)
            seed = ReasoningGymDomain(
                dataset=name, sizes={"train": 1, "search": 1, "val": 1, "test": 1}
            ).seed_harness()
            loaded = loaded or load_model(cfg.model.name, cfg.seed)
            found, by_name = run_harnesses(cfg, {"seed": seed}, "test", k, name, loaded=loaded)
        except (ConfigError, ValueError) as exc:
            rows[name] = {"refused": str(exc)[:200]}
        else:
            score = score_rollouts(by_name["seed"], found)
            rows[name] = {
                "mean": score.mean,
                "ci": [score.ci_low, score.ci_high],
                "pass_at_k": score.pass_at_k,
            }
            rows[name].update(solved=score.solved, commit=code_version())
        console.print(f"{name}: {gym_cells(rows[name], low, high)}", highlight=False)
        if out is not None:
            atomic_write_json(out, {"tasks": tasks, "k": k, "low": low, "high": high, "datasets": rows})
    table = Table(title=f"seed harness on reasoning-gym (test, {tasks} tasks, k={k})")
    for col in ("dataset", f"mean@{k} [95% CI]", f"pass@{k}", "solved", f"in [{low:g}, {high:g}]"):
        table.add_column(col)
    for name in names:
        table.add_row(name, *gym_cells(rows[name], low, high).split(" | "))
    console.print(table)


def gym_rows(out: Path | None, tasks: int, k: int) -> dict[str, dict]:
    """The datasets an earlier `gym-scores --out` run already scored with these sizes (resume)."""
    import json

    if out is None or not out.is_file():
        return {}
    try:
        earlier = json.loads(out.read_text())
        same = (earlier["tasks"], earlier["k"]) == (tasks, k)
        return dict(earlier["datasets"]) if same else {}
    except (ValueError, KeyError, TypeError):
        raise user_error(f"--out {out}: not a gym-scores file; choose another path") from None


def gym_cells(row: dict, low: float, high: float) -> str:
    if "refused" in row:
        return f"refused: {row['refused'][:80]} | - | - | -"
    inside = "yes" if low <= row["mean"] <= high else "no"
    mean = f"{row['mean']:.3f} [{row['ci'][0]:.3f}, {row['ci'][1]:.3f}]"
    return f"{mean} | {row['pass_at_k']:.3f} | {row['solved']:.3f} | {inside}"
