"""`whale status`: where a run (or every run of a comparison) stands, read from its files only.

A running experiment holds the run lock (whale.run.rundir); the files it commits are written atomically
or append-only, so reading them from another terminal while it runs is safe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from whale.core.config import ConfigError
from whale.run.disk import storage_line
from whale.run.rundir import STATE, RunDir


def run_status(folder: Path) -> list[str]:
    """Human-readable lines describing one run directory."""
    run = RunDir(folder)
    if not run.is_run():
        raise ConfigError(f"{folder}: not a whale run (no state.json)")
    state = run.read_state()
    cfg: dict[str, Any] = run.read_config()
    b = state["budget"]
    spent, limit = b["train_rollouts"] + b["search_rollouts"], b["limit_rollouts"]
    pid = run.running_pid()
    condition = "finished" if state["finished"] else f"running (pid {pid})" if pid else "stopped (resumable)"
    sched = state["schedule"]
    method = cfg.get("schedule", {}).get("method", "whale")
    algorithm = cfg.get("weights", {}).get("algorithm", "rft")
    method += f"+{algorithm}" if algorithm != "rft" else ""  # as `whale compare --methods` names it
    lines = [
        f"{folder}: {method} on {cfg.get('domain', {}).get('name')}, "
        f"model {cfg.get('model', {}).get('name')}: {condition}",
        f"budget: {spent}/{limit} rollouts ({100 * spent / max(limit, 1):.0f}%"
        + (
            ", over: the run predates budget cuts or was resumed with a smaller budget"
            if spent > limit
            else ""
        )
        + f"; evaluation is not charged), {b['generated_tokens']} tokens, {b['model_calls']} model calls, "
        f"{b['wall_s']:.0f}s",
        f"phase: {sched['kind']} #{sched['phase']} ({sched['done_in_phase']} units in it); "
        f"{state['weight_steps']} weight steps, {state['search_iters']} search iterations; "
        f"incumbent {state['incumbent']}",
    ]
    points = run.points()
    if points:
        p = points[-1]
        v, t = p["val"], p["test"]
        lines.append(
            f"last eval (point {p['point']}, {p['rollouts']} rollouts): val {v['mean']:.3f} "
            f"[{v['ci_low']:.3f}, {v['ci_high']:.3f}], "
            f"test {t['mean']:.3f} [{t['ci_low']:.3f}, {t['ci_high']:.3f}]"
        )
    usage = state.get("proposer_usage")
    if usage:
        lines.append(f"proposer: {usage['sessions']} sessions, {usage['tokens']} tokens, ${usage['usd']:.2f}"
                     + (f"; {state['proposer_spent']}" if state.get("proposer_spent") else ""))  # fmt: skip
    lines.append(storage_line(folder, state))
    events = run.events()
    if events:
        e = events[-1]
        detail = {k: v for k, v in e.items() if k in ("step", "iteration", "reason", "train_reward", "to")}
        lines.append(f"last event: {e['event']} {detail if detail else ''}".rstrip())
    return lines


def status_lines(folder: Path) -> list[str]:
    """A run directory, or a comparison directory (one block per method and seed)."""
    if RunDir(folder).is_run():
        return run_status(folder)
    runs = sorted(p.parent for p in folder.glob(f"*/seed*/{STATE}"))
    if not runs:
        raise ConfigError(f"{folder}: neither a whale run nor a comparison directory")
    lines: list[str] = []
    for run in runs:
        lines += run_status(run) + [""]
    return lines[:-1]
