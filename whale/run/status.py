"""`whale status`: where a run (or every run of a comparison) stands, read from its files only.

A running experiment holds `run.pid`; the files it commits (state.json, evals.jsonl, events.jsonl) are
written atomically or append-only, so reading them from another terminal while it runs is safe.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import yaml

from whale.core.config import ConfigError
from whale.core.files import atomic_write_json, read_json, read_jsonl
from whale.run.disk import storage_line

PID_FILE = "run.pid"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")
    return not cmdline.exists() or b"whale" in cmdline.read_bytes()


def running_pid(folder: Path) -> int | None:
    """The pid of a live whale process working in `folder`, if any (a stale pid file is ignored)."""
    try:
        pid = int(read_json(folder / PID_FILE)["pid"])
    except (FileNotFoundError, KeyError, ValueError, json.JSONDecodeError):
        return None
    return pid if pid != os.getpid() and _alive(pid) else None


def claim(folder: Path) -> None:
    """Mark `folder` as worked on by this process; refuse if another live process holds it."""
    other = running_pid(folder)
    if other is not None:
        raise ConfigError(f"{folder} is in use by a running whale process (pid {other}); see `whale status`")
    atomic_write_json(folder / PID_FILE, {"pid": os.getpid(), "started": time.time()})


def release(folder: Path) -> None:
    (folder / PID_FILE).unlink(missing_ok=True)


def run_status(folder: Path) -> list[str]:
    """Human-readable lines describing one run directory."""
    if not (folder / "state.json").exists():
        raise ConfigError(f"{folder}: not a whale run (no state.json)")
    state = read_json(folder / "state.json")
    cfg: dict[str, Any] = yaml.safe_load((folder / "config.yaml").read_text()) or {}
    b = state["budget"]
    spent, limit = b["train_rollouts"] + b["search_rollouts"], b["limit_rollouts"]
    pid = running_pid(folder)
    condition = "finished" if state["finished"] else f"running (pid {pid})" if pid else "stopped (resumable)"
    sched = state["schedule"]
    method = cfg.get("schedule", {}).get("method", "whale")
    algorithm = cfg.get("weights", {}).get("algorithm", "rft")
    method += f"+{algorithm}" if algorithm != "rft" else ""  # as `whale compare --methods` names it
    lines = [
        f"{folder}: {method} on {cfg.get('domain', {}).get('name')}, "
        f"model {cfg.get('model', {}).get('name')}: {condition}",
        f"budget: {spent}/{limit} rollouts ({100 * spent / max(limit, 1):.0f}%), "
        f"{b['generated_tokens']} tokens, {b['model_calls']} model calls, {b['wall_s']:.0f}s",
        f"phase: {sched['kind']} #{sched['phase']} ({sched['done_in_phase']} units in it); "
        f"{state['weight_steps']} weight steps, {state['search_iters']} search iterations; "
        f"incumbent {state['incumbent']}",
    ]
    points = read_jsonl(folder / "evals.jsonl")
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
    events = read_jsonl(folder / "events.jsonl")
    if events:
        e = events[-1]
        detail = {k: v for k, v in e.items() if k in ("step", "iteration", "reason", "train_reward", "to")}
        lines.append(f"last event: {e['event']} {detail if detail else ''}".rstrip())
    return lines


def status_lines(folder: Path) -> list[str]:
    """A run directory, or a comparison directory (one block per method and seed)."""
    if (folder / "state.json").exists():
        return run_status(folder)
    runs = sorted(p.parent for p in folder.glob("*/seed*/state.json"))
    if not runs:
        raise ConfigError(f"{folder}: neither a whale run nor a comparison directory")
    lines: list[str] = []
    for run in runs:
        lines += run_status(run) + [""]
    return lines[:-1]
