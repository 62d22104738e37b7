"""`whale compare`: every method on one budget, the same splits and the same evaluation cadence.

    <out>/<method>/seed<N>/   an ordinary run directory per method and seed: reused when finished,
                              resumed when interrupted, refused when it holds a different config
    <out>/compare.json        the table, machine-readable
    <out>/compare.md          the table as Markdown
    <out>/compare.png         test mean@k against budget rollouts spent, one line per method

A method is a schedule (`whale`, `weight-only`, ...) optionally followed by `+<algorithm>` to set
`weights.algorithm` (`whale+dpo`, `weight-only+grpo`) and by `+<rescue mode>` to set `weights.rescue`
(`weight-only+distill`); without them the base config's values are used.

The start evaluation (base weights, seed harness) is computed by the first run of each seed and lent to
the others, which would only repeat it (see whale.run.evaluation.start_eval_source).

Every interval resamples seeds, then tasks within each seed, and is widened to Student's t over the
per-seed means (whale/core/hierarchical.py). A method's difference against the reference method (the
first one listed) is paired by seed and task; the family of those differences is Holm-corrected, and a
verdict is "inconclusive" unless the corrected p-value is below 0.05. compare.md adds each seed's
difference beside the table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from whale.core.config import ALGORITHMS, METHODS, Config, ConfigError, config_from_dict
from whale.core.files import atomic_write_json, atomic_write_text
from whale.core.hierarchical import holm, seed_interval, seed_task_difference, seed_task_mean
from whale.core.stats import PairedDifference, task_means
from whale.run.events import SUMMARY_FIELDS
from whale.run.rundir import RunDir
from whale.run.summary import best_val_point


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
    vs_reference: PairedDifference | None  # selected test minus the reference method's, per seed and task
    rollouts_to_95: float | None  # budget rollouts until test first reached 95% of its own best
    rollouts: float  # budget rollouts spent (train + search), mean over seeds
    eval_rollouts: float
    generated_tokens: float
    model_calls: float
    wall_s: float
    rollouts_to_95_ci: list[float] | None = None  # bootstrap over seeds
    verdict: str = ""  # against the reference: "higher", "lower" or "inconclusive" (Holm-corrected)


ALPHA = 0.05


RESCUES = ("on_policy", "distill")  # weights.rescue modes a method may name


def split_method(method: str) -> tuple[str, dict[str, str]] | None:
    """'whale+dpo+distill' -> ('whale', {'algorithm': 'dpo', 'rescue': 'distill'}); None when the
    method is not a schedule followed by at most one algorithm and one rescue mode."""
    schedule, *modifiers = method.split("+")
    settings: dict[str, str] = {}
    for modifier in modifiers:
        key = "algorithm" if modifier in ALGORITHMS else "rescue" if modifier in RESCUES else None
        if key is None or key in settings:
            return None
        settings[key] = modifier
    return (schedule, settings) if schedule in METHODS else None


def known_method(method: str) -> bool:
    return split_method(method) is not None


def parse_methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if not known_method(m)]
    if unknown or not methods:
        raise ConfigError(
            f"--methods: unknown method {unknown[0] if unknown else '(none)'!r}; "
            f"known: {', '.join(METHODS)}, each optionally +{'|'.join(ALGORITHMS)} and +{'|'.join(RESCUES)}"
        )
    if len(set(methods)) != len(methods):
        raise ConfigError("--methods: a method is listed twice")
    return methods


def method_config(base: Config, method: str, seed_offset: int) -> Config:
    data = base.model_dump()
    schedule, weights = split_method(method)
    data["schedule"]["method"] = schedule
    data["weights"].update(weights)
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


def ensure_run(cfg: Config, folder: Path, console: Console, siblings: list[Path] = ()) -> None:
    """Run, resume or reuse the method's run in `folder`; `siblings` may lend their start evaluation."""
    from whale.run.experiment import Experiment

    if RunDir(folder).is_run():
        saved = RunDir(folder).load_config()
        changed = differing_keys(saved.model_dump(), cfg.model_dump())
        if changed:
            raise ConfigError(
                f"{folder} holds a run with a different config ({', '.join(changed[:3])}); use another --out"
            )
        if RunDir(folder).read_state()["finished"]:
            console.print(
                f"[bold]{folder.parent.name}[/bold] seed {cfg.seed}: finished run reused ({folder})"
            )
            return
        console.print(f"[bold]{folder.parent.name}[/bold] seed {cfg.seed}: resuming {folder}")
        Experiment(cfg, folder, console, resume=True, start_eval_from=siblings).run()
        return
    console.print(f"[bold]{folder.parent.name}[/bold] seed {cfg.seed}: running into {folder}")
    Experiment(cfg, folder, console, start_eval_from=siblings).run()


@dataclass
class RunData:
    """What a comparison needs from one run: evaluation points with per-task scores, budget, unit events.

    Small enough to keep in a repository (docs/results/*.json) instead of the run folder's full traces.
    """

    method: str
    seed: int
    points: list[dict[str, Any]]  # evals.jsonl records plus "tasks": {split: {task_id: mean reward}}
    budget: dict[str, Any]
    events: list[dict[str, Any]]  # weight steps, search iterations, re-evaluations, phase switches
    commits: list[str] = field(default_factory=list)  # the code versions it ran at; [] before they were kept
    machines: list[str] = field(default_factory=list)  # the CPUs it ran on; [] before they were kept


def per_task_rewards(folder: Path, point: int, split: str) -> dict[str, float]:
    means = task_means((r["task_id"], float(r["reward"])) for r in RunDir(folder).eval_rows(point, split))
    return dict(sorted(means.items()))


def load_run_data(folder: Path, method: str) -> RunData:
    """Read one finished run folder into a RunData; a run without evaluation points is a ConfigError."""
    run = RunDir(folder)
    points = run.points()
    if not points:
        raise ConfigError(f"{folder}: no evaluation points")
    for p in points:
        p["tasks"] = {split: per_task_rewards(folder, p["point"], split) for split in ("val", "test")}
    events = [
        {
            "event": e["event"],
            **{k: e[k] for k in (*SUMMARY_FIELDS[e["event"]], "unit", "rollouts", "wall_s") if k in e},
        }
        for e in run.events()
        if e["event"] in SUMMARY_FIELDS
    ]
    seed, state = int(run.read_config()["seed"]), run.read_state()
    commits, machines = list(state.get("code_versions") or []), list(state.get("machines") or [])
    return RunData(method, seed, points, state["budget"], events, commits, machines)


def pooled(per_seed: list[dict[str, float]]) -> dict[str, float]:
    """Per-task mean over seeds; every seed must have scored the same tasks."""
    tasks = sorted(per_seed[0])
    if any(sorted(p) != tasks for p in per_seed):
        raise ConfigError("runs of one comparison scored different test tasks; were the splits changed?")
    return {t: sum(p[t] for p in per_seed) / len(per_seed) for t in tasks}


def per_seed_at(runs: list[RunData], pick: str) -> list[dict[str, float]]:
    """Per-task test rewards of each run (in seed order) at its best-test, validation-selected, first or
    last point."""
    return [PICKS[pick](r.points)["tasks"]["test"] for r in sorted(runs, key=lambda r: r.seed)]


def paired_seeds(
    mine: list[RunData], theirs: list[RunData], pick: str = "selected", their_pick: str | None = None
) -> PairedDifference:
    """Mine minus theirs (at `pick`, theirs at `their_pick` if given), paired by seed and by task, with
    the seed-then-task interval."""
    if sorted(r.seed for r in mine) != sorted(r.seed for r in theirs):
        raise ConfigError("the two methods were run on different seeds; a paired difference needs the same")
    diffs = []
    for a, b in zip(per_seed_at(mine, pick), per_seed_at(theirs, their_pick or pick), strict=True):
        if sorted(a) != sorted(b):
            raise ConfigError("the two methods were scored on different test tasks; were the splits changed?")
        diffs.append({t: a[t] - b[t] for t in sorted(a)})
    return seed_task_difference(diffs)


def verdict(d: PairedDifference, alpha: float = ALPHA) -> str:
    """Higher or lower only when the (Holm-corrected, if set) p-value is below alpha and the interval
    excludes zero; otherwise inconclusive."""
    p = d.p_holm if d.p_holm is not None else d.p
    if p is None or p >= alpha or d.ci_low <= 0 <= d.ci_high:
        return "inconclusive"
    return "higher" if d.mean_diff > 0 else "lower"


def with_holm(diffs: list[PairedDifference]) -> list[PairedDifference]:
    """The same differences with Holm-adjusted p-values over this family."""
    for d, adjusted in zip(diffs, holm([d.p if d.p is not None else 1.0 for d in diffs]), strict=True):
        d.p_holm = adjusted
    return diffs


def _score(per_seed: list[dict[str, float]]) -> Score:
    m = seed_task_mean([[p[t] for t in sorted(p)] for p in per_seed])
    return Score(m.mean, m.ci_low, m.ci_high)


def rollouts_to_fraction(points: list[dict[str, Any]], fraction: float = 0.95) -> int | None:
    best = max(p["test"]["mean"] for p in points)
    if best <= 0:
        return None
    return next(p["rollouts"] for p in points if p["test"]["mean"] >= fraction * best)


def best_test_point(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The point with the best test mean@k (optimistic: picked on test), the earliest on a tie."""
    return max(points, key=lambda p: (p["test"]["mean"], -p["point"]))


PICKS = {
    "best": best_test_point,
    "selected": best_val_point,
    "first": lambda points: points[0],
    "last": lambda points: points[-1],
}


def method_row(method: str, runs: list[RunData]) -> MethodRow:
    """One method's row; its difference against the reference is set by build_rows."""
    pooled(per_seed_at(runs, "selected"))  # every seed scored the same tasks
    to95 = [x for x in (rollouts_to_fraction(r.points) for r in runs) if x is not None]
    cost = seed_interval([float(x) for x in to95]) if to95 else None
    budgets = [r.budget for r in runs]

    def mean_of(key: str) -> float:
        return sum(b[key] for b in budgets) / len(budgets)

    return MethodRow(
        method=method,
        seeds=len(runs),
        best_test=_score(per_seed_at(runs, "best")),
        selected_test=_score(per_seed_at(runs, "selected")),
        vs_reference=None,
        rollouts_to_95=cost.mean if cost else None,
        rollouts=sum(b["train_rollouts"] + b["search_rollouts"] for b in budgets) / len(budgets),
        eval_rollouts=mean_of("eval_rollouts"),
        generated_tokens=mean_of("generated_tokens"),
        model_calls=mean_of("model_calls"),
        wall_s=mean_of("wall_s"),
        rollouts_to_95_ci=[cost.ci_low, cost.ci_high] if cost else None,
    )


def build_rows(runs: dict[str, list[RunData]]) -> list[MethodRow]:
    """One row per method (in the given order); paired differences against the first method, validation-
    selected, Holm-corrected over the family."""
    rows = [method_row(method, method_runs) for method, method_runs in runs.items()]
    reference = rows[0].method
    diffs = with_holm([paired_seeds(runs[row.method], runs[reference]) for row in rows[1:]])
    for row, d in zip(rows[1:], diffs, strict=True):
        row.vs_reference, row.verdict = d, verdict(d)
    return rows


def load_comparison(out: Path, methods: list[str], seeds: int) -> dict[str, list[RunData]]:
    return {m: [load_run_data(run_folder(out, m, i), m) for i in range(seeds)] for m in methods}


def _ci(s: Score) -> str:
    return f"{s.mean:.3f} [{s.ci_low:.3f}, {s.ci_high:.3f}]"


def table_cells(row: MethodRow) -> list[str]:
    d, cost = row.vs_reference, row.rollouts_to_95_ci
    return [
        row.method,
        _ci(row.best_test),
        _ci(row.selected_test),
        f"{d.mean_diff:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}]" if d else "reference",
        f"{d.p_holm:.3f}" if d and d.p_holm is not None else "-",
        row.verdict or "-",
        f"{row.rollouts_to_95:.0f}" + (f" [{cost[0]:.0f}, {cost[1]:.0f}]" if cost else "")
        if row.rollouts_to_95 is not None
        else "-",
        f"{row.rollouts:.0f}",
        f"{row.generated_tokens:.0f}",
        f"{row.model_calls:.0f}",
        f"{row.wall_s:.0f}",
    ]


def headers(k: int, reference: str) -> list[str]:
    return [
        "method", f"best test mean@{k} (optimistic) [95% CI]", f"val-selected test mean@{k} [95% CI]",
        f"selected vs {reference} [95% CI]", "p (Holm)", "verdict", "rollouts to 95% of best [95% CI]",
        "rollouts", "tokens", "model calls", "wall s",
    ]  # fmt: skip


def md_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def per_seed_lines(rows: list[MethodRow]) -> list[str]:
    """Each seed's validation-selected difference against the reference, as a Markdown table."""
    compared = [r for r in rows if r.vs_reference is not None and r.vs_reference.per_seed]
    if not compared:
        return []
    n = max(len(r.vs_reference.per_seed) for r in compared)
    head = ["method", *[f"seed {i}" for i in range(n)], "test"]
    table = []
    for r in compared:
        cells = [f"{v:+.3f}" for v in r.vs_reference.per_seed] + [""] * (n - len(r.vs_reference.per_seed))
        table.append([r.method, *cells, r.vs_reference.test])
    return md_table(head, table).split("\n")


def write_outputs(out: Path, rows: list[MethodRow], k: int, seeds: int) -> Table:
    head = headers(k, rows[0].method)
    atomic_write_json(out / "compare.json", {"k": k, "seeds": seeds, "rows": [asdict(r) for r in rows]})
    lines = md_table(head, [table_cells(r) for r in rows]).split("\n")
    per_seed = per_seed_lines(rows)
    if per_seed:
        lines += ["", f"Validation-selected test mean@{k} minus {rows[0].method}'s, per seed:", "", *per_seed]
    atomic_write_text(out / "compare.md", "\n".join(lines) + "\n")
    table = Table(title=f"compare: {seeds} seed(s), test mean@{k}; intervals resample seeds, then tasks")
    for h in head:
        table.add_column(h)
    for r in rows:
        table.add_row(*table_cells(r))
    return table


def mean_curve(runs: list[RunData], split: str = "test") -> list[tuple[float, float]]:
    """(rollouts, mean@k on `split`) averaged over seeds point by point (every method shares one cadence)."""
    n = min(len(r.points) for r in runs)
    return [
        (
            sum(r.points[i]["rollouts"] for r in runs) / len(runs),
            sum(r.points[i][split]["mean"] for r in runs) / len(runs),
        )
        for i in range(n)
    ]


def plot_curves(path: Path, runs: dict[str, list[RunData]], k: int, title: str = "") -> Path:
    """Test mean@k against budget rollouts: the mean over seeds per method, each seed faint behind it;
    dotted verticals mark whale's phase switches."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for index, (method, method_runs) in enumerate(runs.items()):
        color = f"C{index % 10}"
        for run in method_runs:
            xs = [p["rollouts"] for p in run.points]
            ax.plot(xs, [p["test"]["mean"] for p in run.points], color=color, alpha=0.25, linewidth=1)
            if method.startswith("whale"):
                for e in run.events:
                    if e["event"] == "phase_switch":
                        ax.axvline(e["rollouts"], color=color, linestyle=":", alpha=0.25)
        curve = mean_curve(method_runs)
        label = f"{method} (mean of {len(method_runs)})" if len(method_runs) > 1 else method
        ax.plot(*zip(*curve, strict=True), marker="o", color=color, linewidth=2, label=label)
    ax.set_xlabel("budget rollouts spent (training + search)")
    ax.set_ylabel(f"test mean@{k}")
    ax.set_title(title or "test score against rollouts spent (dotted: whale phase switches)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=120, format="png", metadata={"Software": None})
    plt.close(fig)
    tmp.replace(path)
    return path


def run_all(
    base: Config, methods: list[str], seeds: int, out: Path, console: Console, lenders: list[Path] = ()
) -> None:
    """Run, resume or reuse every method and seed. Runs of one seed share their start evaluation (the
    base weights under the seed harness), also with the runs of other comparison folders in `lenders`."""
    if seeds < 1:
        raise ConfigError("--seeds must be at least 1")
    # seed-major: an interrupted comparison already holds every method for its first seeds
    configs = [(m, i, method_config(base, m, i)) for i in range(seeds) for m in methods]
    for method, i, cfg in configs:
        ensure_run(cfg, run_folder(out, method, i), console, lending_runs(out, methods, i, lenders))


def lending_runs(out: Path, methods: list[str], seed_offset: int, lenders: list[Path] = ()) -> list[Path]:
    """The runs of one seed that may lend their start evaluation: this comparison's methods first, in
    order (the first method's run lends to all the others), then every run of that seed in `lenders`."""
    return [run_folder(out, m, seed_offset) for m in methods] + [
        d / f"seed{seed_offset}"
        for folder in (out, *lenders)
        if folder.is_dir()
        for d in sorted(folder.iterdir())
    ]


def compare(base: Config, methods: list[str], seeds: int, out: Path, console: Console) -> list[MethodRow]:
    """Run (or reuse) every method and seed, then write the table and the plot."""
    run_all(base, methods, seeds, out, console)
    runs = load_comparison(out, methods, seeds)
    rows = build_rows(runs)
    console.print(write_outputs(out, rows, base.eval.k, seeds))
    plot = plot_curves(out / "compare.png", runs, base.eval.k)
    console.print(f"written to {out}/ (compare.md, compare.json, {plot.name}, one run folder per method)")
    return rows
