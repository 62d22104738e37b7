"""Agent proposer (Meta-Harness): a coding-agent CLI reads the archive as files and writes new harnesses.

Each `propose()` is one agent session in a fresh workspace folder (a temp dir, deleted afterwards):

    archive/              a read-only COPY of search/candidates/, frontier.json, evolution_summary.jsonl
    BRIEF.md              the domain brief and the harness contract
    TASK.md               what to do: the parents, where scores and traces are, the output format
    proposals/            the only writable folder: harness files plus pending_eval.json
    tmp/                  scratch, the agent's TMPDIR

The command is `claude` or `codex` (the PRESETS table) or `cfg.command`, an argv template whose
{workspace} {prompt} {n} are filled in. It runs with cwd = the workspace, stdin = /dev/null, in its own
process group (killed whole with SIGKILL at `timeout_s` and again when the session ends), and with a
minimal environment: PATH, HOME, LANG/LC_*, TERM, TZ, USER, LOGNAME, SHELL, proxy and CA-bundle variables,
every variable whose name starts with one of ENV_PREFIXES (ANTHROPIC_, CLAUDE_, OPENAI_, CODEX_,
AZURE_OPENAI_, AWS_, GOOGLE_, GEMINI_, VERTEX_, OPENROUTER_), the names listed in `cfg.env`, and
TMPDIR/TMP/TEMP = the workspace's tmp/, and HOME = the workspace's home/: a throwaway home into which only
the login files the preset names (or `cfg.home_files`) are copied, so the agent can sign in but neither
reads the user's home nor changes it.

Containment (whale.harness.landlock): on Linux with Landlock the agent is started through an exec wrapper
that restricts it, and everything it starts, to: read the workspace, the system folders (SYSTEM_READ),
the agent's own install (found from its executable, plus `cfg.readable`) and the Python running the
wrapper; write proposals/, tmp/, home/ and `cfg.writable`;
write/ioctl on a few devices (/dev/null, /dev/tty, ...). The run directory (validation and test
rollouts, domain data), the real archive and the rest of the user's home are not readable. Network access
is not restricted (the agent needs its API). Without Landlock the session still runs, and the note says
writes are detected, not prevented. Either way the workspace is hashed before and after the session:
any change outside proposals/, tmp/ and home/ is a containment violation, logged, and a changed archive
copy discards the session's proposals. Writes outside the workspace cannot be detected without Landlock.

Results: proposals/pending_eval.json lists {"name", "file", "hypothesis", "base"}; each file must lie
inside proposals/ (no "..", no symlinks, no hard links), be a regular UTF-8 text file under
MAX_FILE_BYTES. Without a usable pending_eval.json the *.py files in proposals/ are taken (not after a
timeout). Everything is logged to search/sessions/<iteration>-agent-<n>/: command.json (argv, sandbox
rules, environment names), stdout.txt, stderr.txt, proposals/ (a copy), session.json (the outcome).
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from whale.core.config import ProposerConfig
from whale.core.files import atomic_write_json
from whale.harness import landlock
from whale.harness.records import HarnessCandidate
from whale.search.agent_sandbox import (
    DEVICES,
    SYSTEM_READ,
    agent_env,
    install_paths,
    kill_group,
    python_paths,
    resolve_executable,
)
from whale.search.agent_workspace import (
    UNCHECKED,
    build_workspace,
    collect,
    compare,
    copy_for_log,
    copy_home_files,
    remove_tree,
    snapshot,
)
from whale.search.proposer import Proposal, ProposalRequest, ProposerUsage, budget_spent, session_dir

PRESETS: dict[str, dict[str, list[str]]] = {
    "claude": {
        # -p: one non-interactive session; json: the result line carries total_cost_usd and usage;
        # acceptEdits: file edits need no confirmation (shell commands still do, and are refused)
        "command": [
            "claude",
            "-p",
            "{prompt}",
            "--output-format",
            "json",
            "--permission-mode",
            "acceptEdits",
        ],
        "home_files": ["~/.claude/.credentials.json", "~/.claude/settings.json", "~/.claude.json"],  # login
    },
    "codex": {
        # exec: non-interactive; --full-auto: edits and commands inside the workspace without asking
        "command": ["codex", "exec", "--skip-git-repo-check", "--full-auto", "{prompt}"],
        "home_files": ["~/.codex/auth.json", "~/.codex/config.toml"],
    },
}

SYSTEM_READ.append("/nix/store")
MAX_OUTPUT_BYTES = 64 << 20  # any one file an agent session writes: its stdout and stderr logs included

PROMPT = (
    "Read TASK.md in the current directory and follow it: study the harnesses, scores and traces under "
    "archive/, then write up to {n} improved harness files and proposals/pending_eval.json into proposals/. "
    "Only proposals/ is writable."
)


class AgentProposer:
    name = "agent"

    def __init__(self, cfg: ProposerConfig, usage: ProposerUsage):
        self.cfg = cfg
        self.usage = usage

    # ---- the session ------------------------------------------------------------------------------------

    def check(self) -> str:
        """What stops this proposer from ever running ("" when nothing): checked before a run starts."""
        template = list(self.cfg.command or PRESETS.get(self.cfg.preset or "", {}).get("command") or [])
        if not template:
            return "agent proposer: no command configured (set proposer.preset or proposer.command)"
        path = agent_env(self.cfg.env)["PATH"]
        if resolve_executable(template[0], path) is None:
            return f"agent command not found: {template[0]!r} is not an executable file or on PATH ({path})"
        return ""

    def propose(self, request: ProposalRequest) -> Proposal:
        cfg = self.cfg
        spent = budget_spent(self.usage, cfg.max_sessions, cfg.max_tokens, cfg.max_usd)
        if spent:
            return Proposal([], spent, exhausted=True)
        problem = self.check()
        if problem:
            return Proposal([], problem)
        preset = PRESETS.get(cfg.preset or "", {})
        template = list(cfg.command or preset.get("command") or [])
        env = agent_env(self.cfg.env)
        exe = resolve_executable(template[0], env["PATH"])
        assert exe is not None
        workspace = Path(tempfile.mkdtemp(prefix="whale-agent-")).resolve()
        try:
            return self._session(request, template, exe, env, preset, workspace)
        finally:
            remove_tree(workspace)

    def _session(
        self,
        request: ProposalRequest,
        template: list[str],
        exe: str,
        env: dict[str, str],
        preset: dict[str, list[str]],
        workspace: Path,
    ) -> Proposal:
        cfg = self.cfg
        folder = Path(session_dir(request, "agent"))
        build_workspace(request, workspace)
        before = snapshot(workspace)
        for key in ("TMPDIR", "TMP", "TEMP"):
            env[key] = str(workspace / "tmp")
        env["HOME"] = str(workspace / "home")
        home_files = copy_home_files(
            preset.get("home_files", []) if cfg.home_files is None else cfg.home_files, workspace / "home"
        )
        fill = {
            "{workspace}": str(workspace),
            "{n}": str(request.n),
            "{prompt}": PROMPT.replace("{n}", str(request.n)),
        }
        argv = [exe] + [_fill(a, fill) for a in template[1:]]
        writable = [_expand(p) for p in cfg.writable]
        readable = [_expand(p) for p in cfg.readable] + install_paths(exe, env["PATH"]) + python_paths()
        abi = landlock.abi_version()
        rules = {
            "enforce": abi > 0,
            "parent_pid": os.getpid(),
            "read": [str(workspace)] + [p for p in SYSTEM_READ + readable if os.path.exists(p)],
            "write": [str(workspace / d) for d in UNCHECKED] + [p for p in writable if os.path.exists(p)],
            "devices": [p for p in DEVICES if os.path.exists(p)],
        }
        missing = [p for p in writable + [_expand(p) for p in cfg.readable] if not os.path.exists(p)]
        atomic_write_json(
            folder / "command.json",
            {
                "argv": argv,
                "cwd": str(workspace),
                "sandbox": rules,
                "landlock_abi": abi,
                "env": sorted(env),
                "home_files": home_files,
                "missing_paths": missing,
            },
        )

        timed_out, returncode, started = False, None, time.monotonic()
        with open(folder / "stdout.txt", "wb") as out, open(folder / "stderr.txt", "wb") as err:
            try:
                proc = subprocess.Popen(
                    landlock.wrapper_argv(rules, argv),
                    cwd=workspace,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                    preexec_fn=_cap_file_size,
                )
            except OSError as exc:
                return Proposal([], f"agent proposer: could not start {argv[0]}: {exc}")
            self.usage.sessions += 1
            try:
                returncode = proc.wait(timeout=cfg.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                proc.terminate()  # the wrapper kills every descendant, setsid() ones included
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            finally:
                kill_group(proc.pid)  # whatever is left of the group, also after a normal exit
                if returncode is None:
                    returncode = proc.wait()
        seconds = time.monotonic() - started
        stdout = _read_capped(folder / "stdout.txt")
        stderr = _read_capped(folder / "stderr.txt")
        tokens, usd, reported = parse_usage(stdout, stderr)
        self.usage.seconds += seconds
        self.usage.tokens += tokens
        self.usage.usd += usd

        violations = compare(before, snapshot(workspace))
        archive_changed = any(v.split(" ", 1)[1].split("/")[0] == "archive" for v in violations)
        proposals = workspace / "proposals"
        copy_for_log(proposals, folder / "proposals")
        candidates: list[HarnessCandidate] = []
        rejected: list[str] = []
        remarks: list[str] = []
        if archive_changed:
            remarks.append("proposals discarded: the archive copy was modified")
        else:
            candidates, rejected, remarks = collect(proposals, request, fallback=not timed_out)

        stderr_lines = [
            ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("whale landlock:")
        ]
        parts = [f"{len(candidates)} candidate{'' if len(candidates) == 1 else 's'}"]
        if timed_out:
            parts.append(f"timed out after {cfg.timeout_s:g} s")
        elif returncode != 0:
            parts.append(f"exit {returncode}")
        parts.append(f"{seconds:.1f} s")
        if tokens or usd:
            parts.append(f"{tokens} tokens, ${usd:.4f}")
        if reported.get("is_error"):
            parts.append(f"agent reported an error ({reported.get('subtype', 'unknown')})")
        parts.append(f"stderr {len(stderr_lines)} lines")
        if returncode not in (0, None) and not timed_out and stderr.strip():
            parts.append(f"last stderr line: {stderr.strip().splitlines()[-1][:200]}")
        if rules["enforce"]:
            parts.append(f"landlock on (ABI {abi})")
            if returncode == 126 and "sandbox not applied" in stderr:
                parts.append("sandbox setup failed, agent not started")
        else:
            parts.append("landlock unavailable: writes outside proposals/ are detected, not prevented")
        if os.geteuid() == 0:
            parts.append("agent ran as root: it could read whale's environment in /proc; run whale as a user")
        if missing:
            parts.append(f"missing sandbox paths: {_listing(missing)}")
        if violations:
            parts.append(f"containment violation: {_listing(violations)}")
        parts += remarks
        if rejected:
            parts.append(f"rejected: {_listing(rejected)}")
        note = "; ".join(parts)
        cost = {"seconds": round(seconds, 3), "tokens": tokens, "usd": usd}
        atomic_write_json(
            folder / "session.json",
            {
                "note": note,
                "returncode": returncode,
                "timed_out": timed_out,
                "cost": cost,
                "landlock": rules["enforce"],
                "landlock_abi": abi,
                "violations": violations,
                "rejected": rejected,
                "remarks": remarks,
                "reported": reported,
                "candidates": [
                    {"id": c.id, "base": c.parent, "hypothesis": c.hypothesis} for c in candidates
                ],
            },
        )
        return Proposal(candidates, note, cost=cost)


# ---- the workspace -------------------------------------------------------------------------------------


# ---- results -------------------------------------------------------------------------------------------


def parse_usage(stdout: str, stderr: str) -> tuple[int, float, dict[str, Any]]:
    """(tokens, usd, the agent's own result fields) from what the tool printed; 0 where it printed none.

    Claude Code (`--output-format json`, or stream-json) prints a result object with `total_cost_usd` and
    `usage` (input, output, cache-creation and cache-read tokens). Codex prints "tokens used: N" (or, with
    --json, turn.completed events with `usage`)."""
    objects: list[dict[str, Any]] = []
    whole = _json_object(stdout)
    if whole is not None:
        objects.append(whole)
    else:
        objects += [obj for obj in map(_json_object, stdout.splitlines()) if obj is not None]
    tokens, usd, reported = 0, 0.0, {}
    for obj in objects:
        cost = obj.get("total_cost_usd", obj.get("cost_usd"))
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost >= 0:
            usd += float(cost)  # a negative self-report would buy the agent more budget
        usage = obj.get("usage")
        if isinstance(usage, dict):
            tokens += sum(
                v
                for k, v in usage.items()
                if k.endswith("tokens") and k != "cached_input_tokens" and isinstance(v, int) and v >= 0
            )
        if obj.get("type") == "result":
            reported = {
                k: obj[k]
                for k in ("subtype", "is_error", "num_turns", "duration_ms", "session_id")
                if k in obj
            }
    if not tokens:
        found = re.findall(r"tokens used:?\s*([\d,]+)", stdout + "\n" + stderr, flags=re.IGNORECASE)
        if found:
            tokens = int(found[-1].replace(",", ""))
    return tokens, usd, reported


# ---- the process ---------------------------------------------------------------------------------------


def _json_object(text: str) -> dict[str, Any] | None:
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _fill(arg: str, fill: dict[str, str]) -> str:
    for key, value in fill.items():
        arg = arg.replace(key, value)
    return arg


def _expand(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def _cap_file_size() -> None:
    """In the agent's process, before it starts: no file it writes, its stdout and stderr included,
    grows past MAX_OUTPUT_BYTES (the kernel stops it with SIGXFSZ), so a flood cannot fill the disk."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_OUTPUT_BYTES, MAX_OUTPUT_BYTES))


def _read_capped(path: Path, limit: int = 4_000_000) -> str:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            f.seek(size - limit)
        return f.read().decode("utf-8", "replace")


def _listing(items: list[str], shown: int = 5) -> str:
    more = f", +{len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more
