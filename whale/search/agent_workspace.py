"""The coding agent's workspace: the archive laid out as files for it to read, the task text, a snapshot
that shows what it changed, and the proposal files collected (size-capped, validated) afterwards."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from whale.core.files import read_json
from whale.harness.records import HarnessCandidate
from whale.search.diagnosis import describe
from whale.search.proposer import ProposalRequest

MAX_FILE_BYTES = 200_000  # one proposed harness file


MAX_LOG_COPY_BYTES = 1_000_000  # files larger than this are not copied into the session log


MAX_LOG_COPY_FILES = 500


UNCHECKED = ("proposals", "tmp", "home")  # workspace folders the agent may change
MAX_HOME_FILE_BYTES = 1 << 20  # a login file copied into the session's home
MAX_WALK_DEPTH = 64  # folder levels any walk of a workspace descends
MAX_WALK_ENTRIES = 100_000


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
    (workspace / "home").mkdir()
    make_read_only(archive)
    for name in ("BRIEF.md", "TASK.md"):
        os.chmod(workspace / name, 0o444)
    os.chmod(workspace, 0o555)  # a second layer for agents that are not root: only proposals/, tmp/ writable


def copy_home_files(names: list[str], home: Path) -> list[str]:
    """Copy these files (paths under the user's home, e.g. an agent's login) into the session's throwaway
    home: the agent can sign in, and nothing it writes there reaches the real one. Regular files only,
    up to MAX_HOME_FILE_BYTES; returns the ones copied."""
    real_home = os.path.realpath(os.path.expanduser("~"))
    copied = []
    for name in names:
        source = os.path.abspath(os.path.expanduser(name))
        rel = os.path.relpath(source, real_home)
        if rel.startswith(os.pardir) or os.path.islink(source) or not os.path.isfile(source):
            continue
        if os.path.getsize(source) > MAX_HOME_FILE_BYTES:
            continue
        target = home / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        os.chmod(target, 0o600)
        copied.append(rel)
    return copied


def task_text(request: ProposalRequest) -> str:
    w = request.weights_version
    parents = []
    for i, p in enumerate(request.parents):
        score = ""
        path = request.archive.candidates_dir / p.id / "evals" / f"{w}.json"
        if path.exists():
            ev = read_json(path)
            score = f": mean {ev['mean']:.3f}, {ev['tokens_per_rollout']:.0f} tokens per rollout"
            if ev.get("rollouts"):
                score += f"; {describe(ev.get('failures', {}), ev['rollouts'])}"
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
  `tokens_per_rollout`, `calls_per_rollout`, `errors`, and `failures` (failed rollouts by kind)
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


def tree(folder: Path, max_depth: int = MAX_WALK_DEPTH) -> list[tuple[str, int, os.stat_result]]:
    """Every entry under `folder` as (path, depth, lstat), parents before children, never following a
    link: iterative, so a 1,200-deep folder an agent made cannot raise RecursionError in the run, and
    bounded (`max_depth` levels, MAX_WALK_ENTRIES entries; what lies beyond is not listed)."""
    found: list[tuple[str, int, os.stat_result]] = []
    stack = [(str(folder), 0)]
    while stack and len(found) < MAX_WALK_ENTRIES:
        path, depth = stack.pop()
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            found.append((e.path, depth + 1, st))
            if stat.S_ISDIR(st.st_mode) and depth + 1 < max_depth:
                stack.append((e.path, depth + 1))
    return found


def make_read_only(folder: Path) -> None:
    for path, _depth, st in tree(folder):
        if stat.S_ISDIR(st.st_mode):
            os.chmod(path, 0o555)
        elif not stat.S_ISLNK(st.st_mode):
            os.chmod(path, 0o444)
    os.chmod(folder, 0o555)


def remove_tree(folder: Path) -> None:
    """Delete `folder` whatever is in it: read-only folders made writable again, deepest first, without
    recursion (shutil.rmtree recurses once per level)."""
    stack, order = [str(folder)], []
    while stack:
        path = stack.pop()
        order.append(path)
        try:
            os.chmod(path, 0o700)
            entries = list(os.scandir(path))
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(e.path)
    for path in reversed(order):
        with contextlib.suppress(OSError):
            os.rmdir(path)


def snapshot(workspace: Path) -> dict[str, tuple]:
    """Every entry of the workspace outside proposals/ and tmp/: path -> (kind, content hash or target)."""
    found: dict[str, tuple] = {}
    inside = tuple(os.path.join(str(workspace), name) + os.sep for name in UNCHECKED)
    for path, depth, st in tree(workspace):
        if path.startswith(inside):
            continue  # what the agent writes there is its proposal
        rel = os.path.relpath(path, workspace)
        if stat.S_ISLNK(st.st_mode):
            found[rel] = ("link", os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            found[rel] = ("dir",) if depth < MAX_WALK_DEPTH else ("dir", "too deep to list")
        elif stat.S_ISREG(st.st_mode):
            found[rel] = ("file", _hash(path))
        else:
            found[rel] = ("other", stat.S_IFMT(st.st_mode))
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
    for path, _depth, st in tree(src, max_depth=8):
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_LOG_COPY_BYTES or copied >= MAX_LOG_COPY_FILES:
            continue
        target = dst / os.path.relpath(path, src)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target, follow_symlinks=False)
            copied += 1
        except OSError:
            pass


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
