"""`whale report DIR`: write report.html for a run or a comparison directory."""

from __future__ import annotations

from pathlib import Path

from whale.core.config import ConfigError
from whale.core.files import atomic_write_text
from whale.report.compare_page import compare_report
from whale.report.run_page import run_report
from whale.run.rundir import RunDir


def write_report(path: Path) -> Path:
    """Write <path>/report.html for a run directory (state.json) or a comparison directory (compare.json)
    and return its path; anything else is a ConfigError."""
    path = Path(path)
    if (path / "compare.json").is_file():
        text = compare_report(path)
    elif RunDir(path).is_run():
        text = run_report(path)
    else:
        raise ConfigError(f"{path}: not a whale run (no state.json) or comparison (no compare.json)")
    out = path / "report.html"
    atomic_write_text(out, text)
    return out
