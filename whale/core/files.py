"""Crash-safe run-directory I/O.

A run can be killed at any instant. Whole files are replaced atomically (temp file in the same folder,
fsync, os.replace), so readers see the old or the new version, never half of one. JSONL logs are appended
in one write per batch; a crash can only tear the last line, which readers ignore and appenders cut off.

A write that fails (a full disk: ENOSPC, a quota: EDQUOT) raises OSError naming the file it was writing
and leaves the old content: a failed atomic write removes its temp file, a failed append is cut back to
the file's previous length.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

PathLike = str | os.PathLike[str]


def _fsync_dir(path: Path) -> None:
    """Persist a rename or new entry in path; best effort where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def _named(exc: OSError, path: Path) -> OSError:
    """`exc` naming `path` when it names no file (a failed write() does not): a full disk then reads
    "[Errno 28] No space left on device: '<run>/state.json'"."""
    if exc.filename is None and exc.errno is not None:
        return OSError(exc.errno, exc.strerror, str(path))
    return exc


def _atomic_write_bytes(path: PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; results should read like any written file
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        named = _named(exc, path)
        if named is exc:
            raise
        raise named from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Replace path with data so that a crash or a full disk leaves either the old or the new file."""
    _atomic_write_bytes(path, data)


def atomic_write_text(path: PathLike, text: str) -> None:
    """Replace path with text so that a crash leaves either the old or the new file."""
    _atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: PathLike, obj: Any) -> None:
    """Atomically write obj as indented JSON; unknown types (paths, enums) fall back to str."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def read_json(path: PathLike) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _parse_record(raw: bytes) -> dict[str, Any] | None:
    try:
        rec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return rec if isinstance(rec, dict) else None


def _scan_jsonl(path: PathLike) -> list[tuple[bytes, dict[str, Any]]]:
    """(raw line, record) for every valid line; a bad last line is dropped, a bad earlier one raises."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")
    numbered = [(i + 1, raw) for i, raw in enumerate(lines) if raw.strip()]
    out = []
    for j, (lineno, raw) in enumerate(numbered):
        rec = _parse_record(raw)
        if rec is None:
            if j == len(numbered) - 1:
                break
            raise ValueError(f"{path}:{lineno}: corrupt record")
        out.append((raw, rec))
    return out


def _torn_tail_offset(path: Path) -> int | None:
    """Byte offset where an unterminated last line starts, or None if the file ends cleanly."""
    size = path.stat().st_size
    if size == 0:
        return None
    with open(path, "rb") as f:
        pos, block = size, 1 << 16
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return None
        while pos > 0:
            start = max(0, pos - block)
            f.seek(start)
            nl = f.read(pos - start).rfind(b"\n")
            if nl >= 0:
                return start + nl + 1
            pos = start
        return 0


def append_jsonl(path: PathLike, records: list[dict[str, Any]]) -> None:
    """Append records, one JSON object per line, in a single fsynced write.

    If a previous crash left an unterminated last line, it is terminated when it is a complete record and
    cut off otherwise, so the new records never fuse with debris into a corrupt middle line.
    """
    if not records:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(r, default=str) + "\n" for r in records).encode("utf-8")
    size = 0
    if path.exists():
        tail = _torn_tail_offset(path)
        if tail is not None:
            with open(path, "rb") as f:
                f.seek(tail)
                fragment = f.read()
            if _parse_record(fragment) is not None:
                data = b"\n" + data
            else:
                os.truncate(path, tail)
        size = path.stat().st_size
    try:
        with open(path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        try:  # a partial write would leave a torn record; cutting it back needs no space
            os.truncate(path, size)
        except OSError:
            pass
        named = _named(exc, path)
        if named is exc:
            raise
        raise named from exc


def read_jsonl(path: PathLike) -> list[dict[str, Any]]:
    """All records; a missing file has none. A torn last line is ignored, a corrupt earlier one raises."""
    return [rec for _, rec in _scan_jsonl(path)]


def jsonl_line_count(path: PathLike) -> int:
    """Number of complete, valid records (what a resumed run can trust)."""
    return len(_scan_jsonl(path))


def truncate_jsonl(path: PathLike, n_lines: int) -> None:
    """Atomically keep only the first n_lines records, e.g. to discard those logged after a checkpoint."""
    scanned = _scan_jsonl(path)
    if not 0 <= n_lines <= len(scanned):
        raise ValueError(f"{path}: cannot keep {n_lines} lines, it has {len(scanned)} valid records")
    if n_lines == 0 and not Path(path).exists():
        return
    _atomic_write_bytes(path, b"".join(raw + b"\n" for raw, _ in scanned[:n_lines]))


def _fsync_tree(root: Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                continue
            with open(p, "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(dirpath))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def atomic_build_folder(target: PathLike, build: Callable[[Path], None]) -> Path:
    """Create folder `target` by `build(tmp)` in a temporary sibling, then one rename: a build that fails
    or is killed leaves no `target` (and its temporary folder is removed). An existing `target` is kept as
    it is, and one that another process renamed into place first wins."""
    target = Path(target)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        build(tmp)
        os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp makes 0700; the folder should read like any other
        os.replace(tmp, target)
    except OSError:
        if not target.exists():
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _fsync_dir(target.parent)
    return target
