"""vLLM's engine-core process outlived a whale process killed with SIGKILL (an out-of-memory kill): it
kept its model and KV cache and a core busy for as long as nobody killed it. vLLM loads this module's
`guard` in each of its processes (a `vllm.general_plugins` entry point); in the processes a whale engine
started, a daemon thread ends the process once its parent is gone."""

from __future__ import annotations

import os
import signal
import threading
import time

OWNER = "WHALE_VLLM_OWNER"  # the pid of the whale process whose engine started these processes
POLL_S = 1.0
GRACE_S = 5.0  # after SIGTERM, for vLLM's own shutdown (shared memory, sockets), before SIGKILL


def guard() -> None:
    """Watch this process's parent, if a whale engine started it; a no-op in any other process."""
    owner = os.environ.get(OWNER, "")
    if not owner.isdigit() or int(owner) == os.getpid():
        return
    watch = threading.Thread(target=_end_when_orphaned, args=(os.getppid(),), name="whale-orphan-guard")
    watch.daemon = True
    watch.start()


def _end_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_S)
    os.kill(os.getpid(), signal.SIGKILL)
