"""Temp folders that belong to one process and do not outlive it.

vLLM's engine leaves half a gigabyte of synced weights and its ZMQ socket files behind unless someone
removes them. A folder made here is removed on `close()`, when dropped, and at exit, but never by a
forked child that inherits the finalizer. One that a kill -9 left behind is removed by the next process
that makes a folder with the same prefix: an owner file names the host and pid, and a folder without
one, or from another host, is left alone.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import weakref
from pathlib import Path

OWNER_FILE = "owner"  # "<host> <pid>" of the process whose temp folder this is


class OwnedTempFolder:
    """A fresh folder under the temp dir named `prefix` + random, owned by this process."""

    def __init__(self, prefix: str):
        remove_orphaned(prefix)
        self.path = Path(tempfile.mkdtemp(prefix=prefix))
        (self.path / OWNER_FILE).write_text(f"{socket.gethostname()} {os.getpid()}")
        self.close = weakref.finalize(self, remove_if_owner, self.path, os.getpid())


def remove_if_owner(path: Path, owner: int) -> None:
    """At exit or when dropped; a forked child that exits normally inherits this and must not run it."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def remove_orphaned(prefix: str) -> None:
    """Temp folders of `prefix` whose owner, a process on this host, is gone (kill -9 runs no finalizer)."""
    for folder in Path(tempfile.gettempdir()).glob(prefix + "*"):
        try:
            host, pid = (folder / OWNER_FILE).read_text().split()
            if host == socket.gethostname():
                os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (OSError, ValueError):  # not ours to judge: no owner file, another user's process, unreadable
            continue
