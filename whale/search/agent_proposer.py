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
TMPDIR/TMP/TEMP = the workspace's tmp/.

Containment (whale.harness.landlock): on Linux with Landlock the agent is started through an exec wrapper
that restricts it, and everything it starts, to: read the workspace, the system folders (SYSTEM_READ),
the agent's own install (found from its executable, plus `cfg.readable`) and the Python running the
wrapper; write proposals/, tmp/, the preset's config paths (~/.claude, ~/.codex) and `cfg.writable`;
write/ioctl on a few devices (/dev/null, /dev/tty, ...). The run directory (validation and test
rollouts, domain data), the real archive and the rest of the user's home are not readable. Network access
is not restricted (the agent needs its API). Without Landlock the session still runs, and the note says
writes are detected, not prevented. Either way the workspace is hashed before and after the session: any
change outside proposals/ and tmp/ is a containment violation, logged, and a changed archive copy discards
the session's proposals. Writes outside the workspace cannot be detected without Landlock.

Results: proposals/pending_eval.json lists {"name", "file", "hypothesis", "base"}; each file must lie
inside proposals/ (no "..", no symlinks, no hard links), be a regular UTF-8 text file under
MAX_FILE_BYTES. Without a usable pending_eval.json the *.py files in proposals/ are taken (not after a
timeout). Everything is logged to search/sessions/<iteration>-agent-<n>/: command.json (argv, sandbox
rules, environment names), stdout.txt, stderr.txt, proposals/ (a copy), session.json (the outcome).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from whale.core.config import ProposerConfig
from whale.core.files import atomic_write_json, read_json
from whale.harness import landlock
from whale.harness.records import HarnessCandidate
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
        "writable": ["~/.claude", "~/.claude.json"],  # its login, settings and session state
    },
    "codex": {
        # exec: non-interactive; --full-auto: edits and commands inside the workspace without asking
        "command": ["codex", "exec", "--skip-git-repo-check", "--full-auto", "{prompt}"],
        "writable": ["~/.codex"],
    },
}

SYSTEM_READ = (
    "/usr /lib /lib32 /lib64 /libx32 /bin /sbin /etc /opt /proc /sys /dev /run/systemd/resolve".split()
)
SYSTEM_READ.append("/nix/store")
DEVICES = "/dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty /dev/ptmx /dev/pts".split()
ENV_NAMES = tuple(
    "PATH HOME LANG LANGUAGE LC_ALL LC_CTYPE TERM TZ USER LOGNAME SHELL HTTP_PROXY HTTPS_PROXY NO_PROXY "
    "ALL_PROXY http_proxy https_proxy no_proxy all_proxy SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE "
    "NODE_EXTRA_CA_CERTS".split()
)
ENV_PREFIXES = tuple(
    "ANTHROPIC_ CLAUDE_ OPENAI_ CODEX_ AZURE_OPENAI_ AWS_ GOOGLE_ GEMINI_ VERTEX_ OPENROUTER_".split()
)
MAX_FILE_BYTES = 200_000  # one proposed harness file
MAX_LOG_COPY_BYTES = 1_000_000  # files larger than this are not copied into the session log
MAX_LOG_COPY_FILES = 500
UNCHECKED = ("proposals", "tmp")  # workspace folders the agent may change

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
        fill = {
            "{workspace}": str(workspace),
            "{n}": str(request.n),
            "{prompt}": PROMPT.replace("{n}", str(request.n)),
        }
        argv = [exe] + [_fill(a, fill) for a in template[1:]]
        writable = [_expand(p) for p in preset.get("writable", []) + list(cfg.writable)]
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


def build_workspace(request: ProposalRequest, workspace: Path) -> None:
    root = request.archive.root
    archive = workspace / "archive"
    archive.mkdir()
    if (root / "candidates").is_dir():
        shutil.copytree(root / "candidates", archive / "candidates", symlinks=True)
    else:
        (archive / "candidates").mkdir()
    for name in ("frontier.json", "evolution_summary.jsonl"):
        if (root / name).is_file():
            shutil.copy2(root / name, archive / name)
    (workspace / "BRIEF.md").write_text(request.brief or "(no brief)\n")
    (workspace / "TASK.md").write_text(task_text(request))
    (workspace / "proposals").mkdir()
    (workspace / "tmp").mkdir()
    make_read_only(archive)
    for name in ("BRIEF.md", "TASK.md"):
        os.chmod(workspace / name, 0o444)
    os.chmod(workspace, 0o555)  # a second layer for agents that are not root: only proposals/, tmp/ writable


def task_text(request: ProposalRequest) -> str:
    w = request.weights_version
    parents = []
    for i, p in enumerate(request.parents):
        score = ""
        path = request.archive.candidates_dir / p.id / "evals" / f"{w}.json"
        if path.exists():
            ev = read_json(path)
            score = f": mean {ev['mean']:.3f}, {ev['tokens_per_rollout']:.0f} tokens per rollout"
        role = " (incumbent, the harness to beat)" if i == 0 else " (frontier member)"
        parents.append(f"- `{p.id}`{role}{score}; its hypothesis: {p.hypothesis or '-'}")
    request_json = json.dumps(
        {
            "parents": [p.id for p in request.parents],
            "incumbent": request.parents[0].id if request.parents else None,
            "n": request.n,
            "weights_version": w,
            "iteration": request.iteration,
        }
    )
    return f"""\
# Task: propose up to {request.n} new harness files

You improve the harness of an LLM agent: a Python file `run(task, llm, tools)` wrapped around the model being
trained (prompts, parsing, tool use, retries, voting, verification). A harness is scored by its mean reward
over the domain's tasks with the current model weights. BRIEF.md describes the domain and the harness
contract; follow it exactly.

## The archive (read-only)

- `archive/candidates/<id>/harness.py`: the code of every harness tried so far
- `archive/candidates/<id>/meta.json`: parent, hypothesis, proposer, status (seed, evaluated, invalid,
  failed, duplicate, ...) and the reason for that status
- `archive/candidates/<id>/evals/<weights>.json`: per-task scores (`per_task`), `mean`,
  `tokens_per_rollout`, `calls_per_rollout`, `errors`
- `archive/candidates/<id>/traces/<weights>.jsonl`: full rollouts, one a line: the model calls (messages
  and replies), tool calls, the answer, the reward, any error
- `archive/frontier.json`: the Pareto set (score up, tokens down) under the current weights
- `archive/evolution_summary.jsonl`: one line per candidate evaluation, oldest first

The current weights are `{w}`: read `evals/{w}.json` and `traces/{w}.jsonl`; files named after other
weights come from older versions of the model.

## Parents

{chr(10).join(parents) or "- (none)"}

Start from the parents. Read their failing traces first and find out why they fail; prefer changing a
mechanism over rewording a prompt, and do not repeat what failed candidates already tried.

## What to write

Write up to {request.n} complete harness files (whole files, not diffs) into `proposals/`, e.g.
`proposals/cand_1.py`, then `proposals/pending_eval.json`, a JSON list with one entry per file:

```json
[{{"name": "short-name", "file": "cand_1.py", "hypothesis": "one line: what changed and why it should score \
higher", "base": "<id of the parent you started from>"}}]
```

Only `proposals/` is writable (and `$TMPDIR` for scratch); nothing outside this folder can be read. There is
no model here: do not try to run the harnesses, they are validated and scored after you finish.

## The request, machine-readable

```json
{request_json}
```
"""


def make_read_only(folder: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(folder):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o444)
        os.chmod(dirpath, 0o555)


def remove_tree(folder: Path) -> None:
    for dirpath, _dirnames, _filenames in os.walk(folder):
        try:
            os.chmod(dirpath, 0o700)
        except OSError:
            pass
    shutil.rmtree(folder, ignore_errors=True)


def snapshot(workspace: Path) -> dict[str, tuple]:
    """Every entry of the workspace outside proposals/ and tmp/: path -> (kind, content hash or target)."""
    found: dict[str, tuple] = {}

    def walk(folder: Path, rel: str) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            found[rel or "."] = ("unlistable", str(exc))
            return
        for e in entries:
            path = f"{rel}/{e.name}" if rel else e.name
            st = e.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                found[path] = ("link", os.readlink(e.path))
            elif stat.S_ISDIR(st.st_mode):
                found[path] = ("dir",)
                if rel or e.name not in UNCHECKED:
                    walk(Path(e.path), path)
            elif stat.S_ISREG(st.st_mode):
                found[path] = ("file", _hash(e.path))
            else:
                found[path] = ("other", stat.S_IFMT(st.st_mode))

    walk(workspace, "")
    return found


def _hash(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    return h.hexdigest()


def compare(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    changes = [f"created {p}" for p in sorted(set(after) - set(before))]
    changes += [f"removed {p}" for p in sorted(set(before) - set(after))]
    changes += [f"modified {p}" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    return changes


def copy_for_log(src: Path, dst: Path) -> None:
    """Copy the proposals folder into the session log: regular files only, never following a link."""
    if src.is_symlink() or not src.is_dir():
        return
    copied = 0
    for dirpath, _dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        target = dst / rel
        target.mkdir(parents=True, exist_ok=True)
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_LOG_COPY_BYTES and copied < MAX_LOG_COPY_FILES:
                try:
                    shutil.copyfile(path, target / name, follow_symlinks=False)
                    copied += 1
                except OSError:
                    pass


# ---- results -------------------------------------------------------------------------------------------


def read_proposal_file(proposals: Path, name: str, limit: int = MAX_FILE_BYTES) -> tuple[str | None, str]:
    """(text, "") or (None, why not): the file must be a regular, singly linked UTF-8 text file inside
    proposals/, reached without symlinks, of at most `limit` bytes."""
    rel = Path(name)
    if not name or rel.is_absolute() or ".." in rel.parts:
        return None, "path escapes proposals/"
    current = proposals
    for part in rel.parts[:-1]:
        current = current / part
        if current.is_symlink() or not current.is_dir():
            return None, "path through a symlink or a missing folder"
    path = proposals / rel
    try:
        st = os.lstat(path)
    except OSError:
        return None, "no such file"
    if stat.S_ISLNK(st.st_mode):
        return None, "symlink"
    if not stat.S_ISREG(st.st_mode):
        return None, "not a regular file"
    if st.st_nlink > 1:
        return None, "hard link"
    if st.st_size > limit:
        return None, f"too big: {st.st_size} bytes, limit {limit}"
    if not os.path.realpath(path).startswith(os.path.realpath(proposals) + os.sep):
        return None, "path escapes proposals/"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None, "not a regular file"
        data = f.read(limit + 1)
    if len(data) > limit:
        return None, f"too big: over {limit} bytes"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    if "\x00" in text:
        return None, "binary: NUL bytes"
    return text, ""


def collect(
    proposals: Path, request: ProposalRequest, fallback: bool = True
) -> tuple[list[HarnessCandidate], list[str], list[str]]:
    """(candidates, per-file rejections, remarks) from proposals/pending_eval.json, or from its *.py files
    when that is missing or malformed (and `fallback`)."""
    remarks: list[str] = []
    if proposals.is_symlink() or not proposals.is_dir():
        return [], [], ["proposals/ is not a folder"]
    entries: list[dict[str, Any]] | None = None
    text, why = read_proposal_file(proposals, "pending_eval.json", 1_000_000)
    if text is None:
        remarks.append(f"pending_eval.json: {why}")
    else:
        try:
            data = json.loads(text)
            if isinstance(data, dict) and isinstance(data.get("candidates"), list):
                data = data["candidates"]
            if not isinstance(data, list) or not all(
                isinstance(e, dict) and isinstance(e.get("file"), str) for e in data
            ):
                raise ValueError('expected a list of {"name", "file", "hypothesis", "base"} objects')
            entries = data
        except ValueError as exc:
            remarks.append(f"pending_eval.json malformed: {str(exc)[:160]}")
    if entries is None:
        if not fallback:
            return [], [], remarks
        entries = [
            {"file": p.name, "hypothesis": "(no pending_eval.json)"}
            for p in sorted(proposals.iterdir())
            if p.name.endswith(".py")
        ]
        if entries:
            remarks.append(f"took the {len(entries)} .py files in proposals/")
    known = set(request.archive.ids())
    default_base = request.parents[0].id if request.parents else None
    candidates: list[HarnessCandidate] = []
    rejected: list[str] = []
    seen: set[str] = set()
    for entry in entries:
        name = entry["file"]
        label = name[:80]
        if os.path.normpath(name) in seen:
            rejected.append(f"{label} (listed twice)")
            continue
        seen.add(os.path.normpath(name))
        if len(candidates) >= request.n:
            rejected.append(f"{label} (over the {request.n} asked for)")
            continue
        source, why = read_proposal_file(proposals, name)
        if source is None:
            rejected.append(f"{label} ({why})")
            continue
        base = entry.get("base")
        parent = base if isinstance(base, str) and base in known else default_base
        hypothesis = str(entry.get("hypothesis") or entry.get("name") or "(no hypothesis)").strip()[:1000]
        candidates.append(HarnessCandidate(request.next_id(), source, parent, hypothesis, "agent"))
    return candidates, rejected, remarks


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
        if isinstance(cost, (int, float)):
            usd += float(cost)
        usage = obj.get("usage")
        if isinstance(usage, dict):
            tokens += sum(
                v
                for k, v in usage.items()
                if k.endswith("tokens") and k != "cached_input_tokens" and isinstance(v, int)
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


def agent_env(extra: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ENV_NAMES or k.startswith(ENV_PREFIXES) or k in extra}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("HOME", os.path.expanduser("~"))
    env.setdefault("LANG", "C.UTF-8")
    return env


def resolve_executable(name: str, path_env: str) -> str | None:
    if os.sep in name:
        path = os.path.abspath(os.path.expanduser(name))
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    found = shutil.which(name, path=path_env)
    return os.path.abspath(found) if found else None


def install_paths(exe: str, path_env: str, depth: int = 0) -> list[str]:
    """What the agent's own install needs to be readable: the executable's real folder, the enclosing
    package root (a folder with package.json, for npm installs), and the same for a script's interpreter."""
    real = os.path.realpath(exe)
    folder = os.path.dirname(real)
    paths = [real, folder]
    up = folder
    for _ in range(3):
        up = os.path.dirname(up)
        if os.path.isfile(os.path.join(up, "package.json")):
            paths.append(up)
            break
    if depth == 0:
        try:
            with open(real, "rb") as f:
                first = f.readline(256)
        except OSError:
            first = b""
        if first.startswith(b"#!"):
            words = first[2:].decode(errors="replace").split()
            if words and os.path.basename(words[0]) == "env":
                words = [w for w in words[1:] if not w.startswith("-")]
            interpreter = resolve_executable(words[0], path_env) if words else None
            if interpreter:
                paths += install_paths(interpreter, path_env, depth + 1)
    return paths


def python_paths() -> list[str]:
    """The Python running the wrapper (it execs the agent, and scripted agents use it too)."""
    return sorted(
        {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    )


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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


def _read_capped(path: Path, limit: int = 4_000_000) -> str:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            f.seek(size - limit)
        return f.read().decode("utf-8", "replace")


def _listing(items: list[str], shown: int = 5) -> str:
    more = f", +{len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more
