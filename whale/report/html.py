"""HTML building blocks of the report: escaping, sections, tables, the page shell. Everything read from
run files goes through `esc`: harness code, hypotheses and reasons are written by LLMs."""

from __future__ import annotations

import html
from typing import Any

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1100px;
color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;font-size:.9em;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;height:auto}pre{background:#f7f7f7;padding:.8em;overflow-x:auto;font-size:.85em}
.add{color:#1a7f37;background:#e6ffec}.del{color:#cf222e;background:#ffebe9}.hunk{color:#0550ae}
.none{color:#777;font-style:italic}.note{color:#555;font-size:.9em}
ul.tree{list-style:none;padding-left:1.2em;border-left:1px dotted #bbb}ul.tree li{margin:.25em 0}
.status{display:inline-block;padding:0 .4em;border-radius:.3em;background:#eee;font-size:.85em}
.status.accepted,.status.seed,.status.population{background:#dafbe1}
.status.invalid,.status.failed,.status.duplicate{background:#ffebe9}
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def none_html(what: str = "none") -> str:
    return f'<p class="none">{esc(what)}</p>'


def section_html(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}">\n<h2>{esc(title)}</h2>\n{body}\n</section>'


def table_html(
    head: list[str], rows: list[list[str]], numeric: set[int] | frozenset[int] = frozenset()
) -> str:
    """A table; cells are escaped here. Columns whose index is in `numeric` are right-aligned."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    num = ' class="num"'
    lines = [
        "<tr>" + "".join(f"<td{num if j in numeric else ''}>{esc(c)}</td>" for j, c in enumerate(r)) + "</tr>"
        for r in rows
    ]
    return f"<table>\n<tr>{th}</tr>\n" + "".join(line + "\n" for line in lines) + "</table>"


def facts_html(rows: list[list[str]]) -> str:
    """A two-column table of label and value; cells are escaped here."""
    body = "".join(f'<tr><th scope="row">{esc(k)}</th><td>{esc(v)}</td></tr>\n' for k, v in rows)
    return f"<table>\n{body}</table>"


def ci_text(score: dict[str, Any] | None) -> str:
    if not score:
        return "-"
    return f"{score['mean']:.3f} [{score['ci_low']:.3f}, {score['ci_high']:.3f}]"


def duration_text(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}h {rest // 60:02d}m" if hours else f"{rest // 60}m {rest % 60:02d}s"


def page(title: str, sections: list[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<h1>{esc(title)}</h1>\n"
        + "\n".join(sections)
        + "\n</body>\n</html>\n"
    )


def diff_html(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        cls = ""
        if line.startswith(("+++", "---")):
            cls = "hunk"
        elif line.startswith("+"):
            cls = "add"
        elif line.startswith("-"):
            cls = "del"
        elif line.startswith("@@"):
            cls = "hunk"
        lines.append(f'<span class="{cls}">{esc(line)}</span>' if cls else esc(line))
    return "<pre>" + "\n".join(lines) + "</pre>"
