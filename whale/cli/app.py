"""The `whale` app and its sub-apps, the console every command prints to, and the user-error helper."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Weight-Harness Alternating LEarning.")
# Long paths and verdicts stay on one line when piped, and tables get room instead of rich's 80 columns.
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False) -> None:
    del debug  # read from sys.argv by whale.cli.main.main, which owns the error handling


archive_app = typer.Typer(no_args_is_help=True, help="Browse a run's harness archive.")
app.add_typer(archive_app, name="archive")
harness_app = typer.Typer(no_args_is_help=True, help="Work with harness files.")
app.add_typer(harness_app, name="harness")


def user_error(message: str) -> Exception:
    from whale.core.config import ConfigError

    return ConfigError(message)
