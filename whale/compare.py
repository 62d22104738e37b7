"""`whale compare`: every method on one budget, the same splits and the same evaluation cadence.

    <out>/<method>/seed<N>/   an ordinary run directory per method and seed: reused when finished,
                              resumed when interrupted, refused when it holds a different config
    <out>/compare.json        the table, machine-readable
    <out>/compare.md          the table as Markdown
    <out>/compare.png         test mean@k against budget rollouts spent, one line per method

A method is a schedule (`whale`, `weight-only`, ...) optionally followed by `+<algorithm>` to set
`weights.algorithm` (`whale+dpo`, `weight-only+grpo`); without it the base config's algorithm is used.

Scores are pooled over seeds per task (tasks are the resampling unit of every interval), so a method's
row and its paired difference against the reference method (the first one listed) use the same tasks.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from whale.config import ALGORITHMS, Config, ConfigError, config_from_dict
from whale.metrics import PairedDifference, bootstrap_ci, paired_difference
from whale.schedule import METHODS
from whale.store import atomic_write_json, atomic_write_text, read_json, read_jsonl
from whale.summary import best_val_point


@dataclass
class Score:
    mean: float
    ci_low: float
    ci_high: float


@dataclass
class MethodRow:
    method: str
    seeds: int
    best_test: Score  # each seed's best evaluation point (optimistic: picked on test)
    selected_test: Score  # each seed's point with the best validation score (the honest number)
    vs_reference: PairedDifference | None  # selected test minus the reference method's, per task
    rollouts_to_95: float | None  # budget rollouts until test first reached 95% of its own best
    rollouts: float  # budget rollouts spent (train + search), mean over seeds
    eval_rollouts: float
    generated_tokens: float
    model_calls: float
    wall_s: float


def split_method(method: str) -> tuple[str, str | None]:
    """'whale+dpo' -> ('whale', 'dpo'); 'whale' -> ('whale', None)."""
    schedule, _, algorithm = method.partition("+")
    return schedule, algorithm or None


def known_method(method: str) -> bool:
    schedule, algorithm = split_method(method)
    return schedule in METHODS and (algorithm is None or algorithm in ALGORITHMS) and not method.endswith("+")


def parse_methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if not known_method(m)]
    if unknown or not methods:
        raise ConfigError(
            f"--methods: unknown method {unknown[0] if unknown else '(none)'!r}; "
            f"known: {', '.join(METHODS)}, each optionally +{'|'.join(ALGORITHMS)}"
        )
    if len(set(methods)) != len(methods):
        raise ConfigError("--methods: a method is listed twice")
    return methods


def method_config(base: Config, method: str, seed_offset: int) -> Config:
    data = base.model_dump()
    schedule, algorithm = split_method(method)
    data["schedule"]["method"] = schedule
    if algorithm:
        data["weights"]["algorithm"] = algorithm
    data["seed"] = base.seed + seed_offset
    return config_from_dict(data, f"{method} seed {data['seed']}")


def run_folder(out: Path, method: str, seed_offset: int) -> Path:
    return out / method / f"seed{seed_offset}"


def differing_keys(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ; both sides are validated configs, so new defaults match."""
    keys = []
    for key in sorted(set(a) | set(b)):
        left, right = a.get(key), b.get(key)
        if isinstance(left, dict) and isinstance(right, dict):
            keys += differing_keys(left, right, f"{prefix}{key}.")
        elif left != right:
            keys.append(f"{prefix}{key}")
    return keys


def ensure_run(cfg: Config, folder: Path, console: Console) -> None:
    """Run, resume or reuse the method's run in `folder`."""
    from whale.experiment import Experiment

    if (folder / "state.json").exists():
        saved = config_from_dict(yaml.safe_load((folder / "config.yaml").read_text()), str(folder))
        changed = differing_keys(saved.model_dump(), cfg.model_dump())
        if changed:
            raise ConfigError(
                f"{folder} holds a run with a different config ({', '.join(changed[:3])}); use another --out"
            )
        if read_json(folder / "state.json")["finished"]:
            console.print(
                f"[bold]{folder.parent.name}[/bold] seed {cfg.seed}: finished run reused ({folder})"
            )
            return
        console.print(f"[bold]{folder.parent.name}[/bold] seed {cfg.seed}: resuming {folder}")
        Experiment(cfg, folder, console, resume=True).run()
        return
    console.print(f"[bold]{folder.parent.name}[/bold] seed {cfg.seed}: running into {folder}")
    Experiment(cfg, folder, console).run()


def per_task_rewards(folder: Path, point: int, split: str = "test") -> dict[str, float]:
    by_task: dict[str, list[float]] = defaultdict(list)
    for r in read_jsonl(folder / "evals" / f"{point:03d}" / f"{split}.jsonl"):
        by_task[r["task_id"]].append(float(r["reward"]))
    return {t: sum(v) / len(v) for t, v in by_task.items()}


def pooled(per_seed: list[dict[str, float]]) -> dict[str, float]:
    """Per-task mean over seeds; every seed must have scored the same tasks."""
    tasks = sorted(per_seed[0])
    if any(sorted(p) != tasks for p in per_seed):
        raise ConfigError("runs of one comparison scored different test tasks; were the splits changed?")
    return {t: sum(p[t] for p in per_seed) / len(per_seed) for t in tasks}


def _score(per_task: dict[str, float]) -> Score:
    values = [per_task[t] for t in sorted(per_task)]
    lo, hi = bootstrap_ci(values)
    return Score(sum(values) / len(values), lo, hi)


def rollouts_to_fraction(points: list[dict[str, Any]], fraction: float = 0.95) -> int | None:
    best = max(p["test"]["mean"] for p in points)
    if best <= 0:
        return None
    return next(p["rollouts"] for p in points if p["test"]["mean"] >= fraction * best)


def method_row(method: str, folders: list[Path]) -> tuple[MethodRow, dict[str, float]]:
    """The row, and the pooled per-task validation-selected test rewards (for paired differences)."""
    best, selected, to95, budgets = [], [], [], []
    for folder in folders:
        points = read_jsonl(folder / "evals.jsonl")
        if not points:
            raise ConfigError(f"{folder}: no evaluation points")
        top = max(points, key=lambda p: p["test"]["mean"])
        chosen = best_val_point(points)
        best.append(per_task_rewards(folder, top["point"]))
        selected.append(per_task_rewards(folder, chosen["point"]))
        reached = rollouts_to_fraction(points)
        if reached is not None:
            to95.append(reached)
        budgets.append(read_json(folder / "state.json")["budget"])

    def mean_of(key: str) -> float:
        return sum(b[key] for b in budgets) / len(budgets)

    chosen_tasks = pooled(selected)
    row = MethodRow(
        method=method,
        seeds=len(folders),
        best_test=_score(pooled(best)),
        selected_test=_score(chosen_tasks),
        vs_reference=None,
        rollouts_to_95=sum(to95) / len(to95) if to95 else None,
        rollouts=sum(b["train_rollouts"] + b["search_rollouts"] for b in budgets) / len(budgets),
        eval_rollouts=mean_of("eval_rollouts"),
        generated_tokens=mean_of("generated_tokens"),
        model_calls=mean_of("model_calls"),
        wall_s=mean_of("wall_s"),
    )
    return row, chosen_tasks


def build_rows(out: Path, methods: list[str], seeds: int) -> list[MethodRow]:
    rows, selected = [], {}
    for method in methods:
        row, selected[method] = method_row(method, [run_folder(out, method, i) for i in range(seeds)])
        rows.append(row)
    reference = methods[0]
    for row in rows[1:]:
        ref, mine = selected[reference], selected[row.method]
        tasks = sorted(ref)
        row.vs_reference = paired_difference([mine[t] for t in tasks], [ref[t] for t in tasks])
    return rows


def _ci(s: Score) -> str:
    return f"{s.mean:.3f} [{s.ci_low:.3f}, {s.ci_high:.3f}]"


def table_cells(row: MethodRow) -> list[str]:
    d = row.vs_reference
    return [
        row.method,
        _ci(row.best_test),
        _ci(row.selected_test),
        f"{d.mean_diff:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}]" if d else "reference",
        f"{row.rollouts_to_95:.0f}" if row.rollouts_to_95 is not None else "-",
        f"{row.rollouts:.0f}",
        f"{row.generated_tokens:.0f}",
        f"{row.model_calls:.0f}",
        f"{row.wall_s:.0f}",
    ]


def headers(k: int, reference: str) -> list[str]:
    return [
        "method", f"best test mean@{k} [95% CI]", f"val-selected test mean@{k} [95% CI]",
        f"selected vs {reference} [95% CI]", "rollouts to 95% of best", "rollouts", "tokens",
        "model calls", "wall s",
    ]  # fmt: skip


def write_outputs(out: Path, rows: list[MethodRow], k: int, seeds: int) -> Table:
    head = headers(k, rows[0].method)
    atomic_write_json(out / "compare.json", {"k": k, "seeds": seeds, "rows": [asdict(r) for r in rows]})
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(table_cells(r)) + " |" for r in rows]
    atomic_write_text(out / "compare.md", "\n".join(lines) + "\n")
    table = Table(title=f"compare: {seeds} seed(s), test mean@{k}")
    for h in head:
        table.add_column(h)
    for r in rows:
        table.add_row(*table_cells(r))
    return table


def plot_curves(out: Path, methods: list[str], seeds: int, k: int) -> Path:
    """Test mean@k against budget rollouts; dotted verticals mark the phase switches of whale runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for index, method in enumerate(methods):
        color = f"C{index % 10}"
        for i in range(seeds):
            folder = run_folder(out, method, i)
            points = read_jsonl(folder / "evals.jsonl")
            xs = [p["rollouts"] for p in points]
            ys = [p["test"]["mean"] for p in points]
            ax.plot(xs, ys, marker="o", color=color, label=method if i == 0 else None, alpha=0.9)
            if method.startswith("whale"):
                for e in read_jsonl(folder / "events.jsonl"):
                    if e["event"] == "phase_switch":
                        ax.axvline(e["rollouts"], color=color, linestyle=":", alpha=0.4)
    ax.set_xlabel("budget rollouts spent (training + search)")
    ax.set_ylabel(f"test mean@{k}")
    ax.set_title("test score against rollouts spent (dotted: whale phase switches)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out / "compare.png"
    tmp = path.with_name(".compare.png.tmp")
    fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    tmp.replace(path)
    return path


def compare(base: Config, methods: list[str], seeds: int, out: Path, console: Console) -> list[MethodRow]:
    """Run (or reuse) every method and seed, then write the table and the plot."""
    if seeds < 1:
        raise ConfigError("--seeds must be at least 1")
    # seed-major: an interrupted comparison already holds every method for its first seeds
    configs = [(m, i, method_config(base, m, i)) for i in range(seeds) for m in methods]
    for method, i, cfg in configs:
        ensure_run(cfg, run_folder(out, method, i), console)
    rows = build_rows(out, methods, seeds)
    console.print(write_outputs(out, rows, base.eval.k, seeds))
    plot = plot_curves(out, methods, seeds, base.eval.k)
    console.print(f"written to {out}/ (compare.md, compare.json, {plot.name}, one run folder per method)")
    return rows
