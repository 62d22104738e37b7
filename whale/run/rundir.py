"""The run folder, and the only module that knows its file names.

    config.yaml            resolved config
    events.jsonl           one record per weight step, search iteration and phase switch (whale.run.events)
    evals.jsonl            one record per evaluation point (validation and test mean@k with CIs)
    rollouts/train.jsonl   every weight-step rollout
    evals/<point>/<split>.jsonl   evaluation rollouts (journal/: those of a point still being evaluated)
    search/                the harness archive (whale.search.archive)
    checkpoints/<unit>/    trainable weights + optimizer
    state.json             the commit point: written last, atomically, after every unit of work
    run.pid                held by the process working on the run
    summary.json           the headline numbers, written when the run ends

Resume reads state.json, cuts every JSONL back to the length it had at that commit, and drops archive
candidates and checkpoint folders written after it: nothing finished is redone or counted twice.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from whale.core import provenance
from whale.core.config import Config, ConfigError, config_from_dict
from whale.core.files import (
    append_jsonl,
    atomic_write_json,
    atomic_write_text,
    jsonl_line_count,
    read_json,
    read_jsonl,
    truncate_jsonl,
)

CONFIG, STATE, PID, SUMMARY = "config.yaml", "state.json", "run.pid", "summary.json"
EVENTS, EVALS, TRAIN = "events.jsonl", "evals.jsonl", "rollouts/train.jsonl"
SEARCH, CHECKPOINTS = "search", "checkpoints"
LOGS = (EVENTS, EVALS, TRAIN, f"{SEARCH}/evolution_summary.jsonl")  # cut back to their length on resume


@dataclass
class RunState:
    schedule: dict[str, Any]
    budget: dict[str, Any]
    unit: int = 0
    weight_steps: int = 0
    weights_version: str = "w0"  # the weights served: w<the last step that changed them>
    search_iters: int = 0
    eval_points: int = 0
    incumbent: str = "c0000"
    incumbent_eval: dict[str, Any] | None = None
    population: list[dict[str, Any]] | None = None  # fast-slow: CandidateEval of each member
    proposer_usage: dict[str, Any] | None = None  # LLM/agent sessions, tokens, USD, seconds so far
    proposer_spent: str = ""  # why the proposer may not run again, once its budget is spent
    empty_searches: int = 0  # search iterations in a row that had no candidate to run
    next_eval_at: int = 0  # budget rollouts at which the next evaluation is due
    checkpoint: str | None = None
    kept_checkpoints: list[str] | None = None
    checkpoint_bytes: int = 0  # weights checkpoints written over the run's life (retention deletes some)
    reference_checkpoint: str | None = None  # the weights at the current weight phase's start (None: initial)
    engine_calls: int = 0
    log_lines: dict[str, int] | None = None
    candidates: list[str] | None = None
    finished: bool = False
    code_versions: list[str] | None = None  # the commits it ran at, in order (a resume may add one)
    machines: list[str] | None = None  # the CPUs it ran on, in order (provenance.machine)
    measured: dict[str, Any] | None = None  # val gains per rollout, per side (schedule.measured_gains)

    def stamp(self) -> None:
        """Record this process's commit and CPU where they differ from the last recorded."""
        self.code_versions = provenance.with_version(self.code_versions)
        self.machines = provenance.appended(self.machines, provenance.machine())


@dataclass(frozen=True)
class RunDir:
    path: Path

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    # ---- what is there ----------------------------------------------------------------------------

    def is_run(self) -> bool:
        return (self.path / STATE).is_file()

    def read_config(self) -> dict[str, Any]:
        """config.yaml as saved (plain data; {} when missing)."""
        file = self.path / CONFIG
        return (yaml.safe_load(file.read_text()) or {}) if file.is_file() else {}

    def load_config(self) -> Config:
        """config.yaml validated as a Config (keys added since the run began take their defaults)."""
        return config_from_dict(self.read_config(), str(self.path / CONFIG))

    def read_state(self) -> dict[str, Any]:
        return read_json(self.path / STATE)

    def points(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path / EVALS)

    def events(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path / EVENTS)

    def started_config(self) -> dict[str, Any] | None:
        """The config as the run began it (its start event: engine kind and dtypes as decided)."""
        start = next((e for e in self.events() if e.get("event") == "start"), None)
        return None if start is None else start.get("config")

    def eval_file(self, point: int, split: str) -> Path:
        return self.path / "evals" / f"{point:03d}" / f"{split}.jsonl"

    def journal_file(self, point: int, label: str) -> Path:
        """Where an evaluation of `point` in progress keeps its finished rollouts (evaluation.Journal)."""
        name = "".join(c if c.isalnum() else "-" for c in label)
        return self.path / "evals" / f"{point:03d}" / "journal" / f"{name}.jsonl"

    def eval_rows(self, point: int, split: str) -> list[dict[str, Any]]:
        return read_jsonl(self.eval_file(point, split))

    def checkpoint(self, name: str) -> Path:
        return self.path / CHECKPOINTS / name

    def harness_file(self, candidate_id: str) -> Path:
        """A candidate's code in the archive (whale.search.archive lays the archive out)."""
        return self.path / SEARCH / "candidates" / candidate_id / "harness.py"

    # ---- writing ------------------------------------------------------------------------------------

    def create(self, cfg: Config) -> None:
        """A new run folder holding its config; refused where a run already is."""
        if self.is_run():
            raise ConfigError(f"{self.path} already holds a run; use --resume {self.path} or another --out")
        self.path.mkdir(parents=True, exist_ok=True)
        self.claim()
        atomic_write_text(self.path / CONFIG, yaml.safe_dump(cfg.model_dump(), sort_keys=False))

    def append(self, name: str, records: list[dict[str, Any]]) -> None:
        append_jsonl(self.path / name, records)

    def write_eval_rows(self, point: int, split: str, rows: list[dict[str, Any]]) -> None:
        file = self.eval_file(point, split)
        file.unlink(missing_ok=True)  # a unit redone after a crash writes its rollouts again
        append_jsonl(file, rows)

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_json(self.path / SUMMARY, summary)

    def commit(self, state: RunState, candidates: list[str]) -> None:
        """state.json, the single commit point, with the length of every log and the archive's ids."""
        state.log_lines = {name: jsonl_line_count(self.path / name) for name in LOGS}
        state.candidates = candidates
        atomic_write_json(self.path / STATE, asdict(state))
        for journal in (self.path / "evals").glob("*/journal"):  # committed points' rollouts are in place
            if int(journal.parent.name) < state.eval_points:
                shutil.rmtree(journal, ignore_errors=True)

    def load_state(self) -> RunState:
        """The last committed state, with every log cut back to its length at that commit."""
        raw = self.read_state()
        raw.setdefault("weights_version", f"w{raw.get('weight_steps', 0)}")  # a run begun before the field
        state = RunState(**raw)
        for name, n in (state.log_lines or {}).items():
            if (self.path / name).exists():
                truncate_jsonl(self.path / name, n)
        return state

    def keep_checkpoints(self, keep: set[str | None], prefix: str = "") -> None:
        """Delete every checkpoint folder (whose name starts with `prefix`) not in `keep`."""
        for folder in (self.path / CHECKPOINTS).glob(f"{prefix}*"):
            if folder.name not in keep:
                shutil.rmtree(folder, ignore_errors=True)

    # ---- the lock -----------------------------------------------------------------------------------

    def running_pid(self) -> int | None:
        """The pid of a live process working in this folder, if any (a stale pid file is ignored)."""
        try:
            held = read_json(self.path / PID)
            pid = int(held["pid"])
        except (FileNotFoundError, KeyError, ValueError, TypeError, json.JSONDecodeError):
            return None
        return pid if pid != os.getpid() and _alive(pid, held.get("process_start")) else None

    def claim(self) -> None:
        """Mark the folder as worked on by this process; refuse if another live process holds it."""
        other = self.running_pid()
        if other is not None:
            raise ConfigError(
                f"{self.path} is in use by a running whale process (pid {other}); see `whale status`"
            )
        holder = {"pid": os.getpid(), "started": time.time(), "process_start": _process_start(os.getpid())}
        atomic_write_json(self.path / PID, holder)

    def release(self) -> None:
        (self.path / PID).unlink(missing_ok=True)


def _alive(pid: int, process_start: int | None) -> bool:
    """Whether `pid` still runs and is the process that wrote the pid file, not a later one given its pid.
    That is told by the process's start time where the file has it; a file from before that field falls
    back to "whale" in the command line, which a script driving whale's API may lack."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now = _process_start(pid)
    if process_start is not None and now is not None:
        return now == process_start
    cmdline = Path(f"/proc/{pid}/cmdline")
    return not cmdline.exists() or b"whale" in cmdline.read_bytes()


def _process_start(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (Linux's /proc; None elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the name in parentheses may hold spaces
