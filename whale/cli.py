"""The `whale` command line. Errors a user can cause print one line and exit 2 (tracebacks with --debug)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Weight-Harness Alternating LEarning.")
console = Console()


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
) -> None:
    """Run a WHALE experiment: alternate RFT weight steps and harness search until the budget is spent."""
    from whale.config import load_config
    from whale.experiment import Experiment

    if resume is not None:
        import yaml

        from whale.config import config_from_dict

        cfg_path = resume / "config.yaml"
        if not cfg_path.is_file():
            raise _user_error(f"--resume {resume}: no config.yaml there (not a whale run directory)")
        cfg = config_from_dict(yaml.safe_load(cfg_path.read_text()), str(cfg_path))
        out_dir = resume
    else:
        cfg = load_config(preset, config, set_ or [])
        out_dir = out or Path("runs") / cfg.name
    console.print(
        f"[bold]whale[/bold] {cfg.name}: model={cfg.model.name} domain={cfg.domain.name} -> {out_dir}"
    )
    summary = Experiment(cfg, out_dir, console, resume=resume is not None).run()
    print_summary(summary, out_dir)


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
    from whale.config import ConfigError

    return ConfigError(message)


def main() -> None:
    from whale.config import ConfigError
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
    except KeyboardInterrupt:
        print("whale: interrupted; resume with `whale run --resume <run dir>`", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
