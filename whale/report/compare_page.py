"""The report of a comparison directory: the method table, the curves, and links to every run's page."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any
from urllib.parse import quote

from whale.core.files import atomic_write_text, read_json
from whale.report.html import ci_text, duration_text, esc, none_html, page, section_html, table_html
from whale.report.plots import (
    PNG_MAGIC,
    img_html,
    new_figure,
    png_uri,
)
from whale.report.run_page import run_report
from whale.run.rundir import RunDir
from whale.run.summary import run_summary


def method_table(data: dict[str, Any]) -> str:
    """compare.json's rows, formatted as compare.md formats them."""
    from whale.core.stats import PairedDifference
    from whale.studies.compare import MethodRow, Score, headers, table_cells

    rows = []
    for d in data["rows"]:
        diff = d.get("vs_reference")
        row = MethodRow(
            **{
                **d,
                "best_test": Score(**d["best_test"]),
                "selected_test": Score(**d["selected_test"]),
                "vs_reference": PairedDifference(**diff) if diff else None,
            }
        )
        rows.append(table_cells(row))
    return table_html(headers(data["k"], data["rows"][0]["method"]), rows, {1, 2, 3, 4, 6, 7, 8, 9, 10})


def plot_compare(path: Path, methods: list[str], seeds: int) -> str:
    """compare.png when present, else the test curves re-plotted from the run folders."""
    png = path / "compare.png"
    if png.is_file() and png.read_bytes()[:8] == PNG_MAGIC:
        return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")
    fig, ax = new_figure(height=5.0)
    for index, method in enumerate(methods):
        for i in range(seeds):
            points = RunDir(path / method / f"seed{i}").points()
            ax.plot(
                [p["rollouts"] for p in points],
                [p["test"]["mean"] for p in points],
                marker="o",
                color=f"C{index % 10}",
                label=method if i == 0 else None,
            )
    ax.set_xlabel("budget rollouts spent (training + search)")
    ax.set_ylabel("test mean@k")
    ax.grid(alpha=0.3)
    ax.legend()
    return png_uri(fig)


def method_runs(path: Path, method: str, seeds: int) -> str:
    """One method's headline numbers per seed, each run's report written and linked relatively."""
    rows = []
    for i in range(seeds):
        folder = path / method / f"seed{i}"
        if not RunDir(folder).is_run():
            rows.append([f"seed{i}", "missing", "", "", "", "", "", ""])
            continue
        atomic_write_text(folder / "report.html", run_report(folder))
        state = RunDir(folder).read_state()
        s = run_summary(folder)
        b = state.get("budget", {})
        rows.append(
            [
                f'<a href="{esc(quote(f"{method}/seed{i}/report.html"))}">seed{i}</a>',
                *[
                    esc(ci_text(s[key]) if s else "-")
                    for key in ("before", "after", "best_test", "test_at_best_val")
                ],
                esc(str(b.get("train_rollouts", 0) + b.get("search_rollouts", 0))),
                esc(f"{b.get('generated_tokens', 0):,}"),
                esc(duration_text(b.get("wall_s", 0.0))),
            ]
        )
    head = ["run report", "before", "after", "best test", "test at best val", "rollouts", "tokens", "wall"]
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    # the cells are escaped above: the first one holds a link
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>\n" for r in rows)
    table = f"<table>\n<tr>{th}</tr>\n{body}</table>"
    return f'<div id="method-{esc(method)}">\n<h3>{esc(method)}</h3>\n{table}\n</div>'


def compare_report(path: Path) -> str:
    data = read_json(path / "compare.json")
    rows = data.get("rows") or []
    methods, seeds = [r["method"] for r in rows], int(data.get("seeds", 1))
    if not rows:
        return page(f"whale comparison: {path.name}", [section_html("methods", "Methods", none_html())])
    k = data.get("k", "k")
    note = (
        f'<p class="note">{seeds} seed(s) per method; scores pooled over seeds per task. Best test is picked '
        f"on test (optimistic); the validation-selected test mean@{k} is the honest number; the paired "
        f"difference is against {esc(methods[0])}.</p>"
    )
    sections = [
        section_html("methods", "Methods", method_table(data) + note),
        section_html(
            "curves", "Test curves", img_html(plot_compare(path, methods, seeds), "test mean@k per method")
        ),
        section_html("runs", "Runs per method", "\n".join(method_runs(path, m, seeds) for m in methods)),
    ]
    return page(f"whale comparison: {path.name}", sections)
