import json
import os
import platform
import subprocess
import sys

import pytest

from whale.core.allocator import USER_SETTINGS

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's")

BLOCK = 64 << 20  # above glibc's largest dynamic mmap threshold (32 MB): mapped afresh by default
PAGES = BLOCK // 4096

# Allocate, touch and free one large block 20 times, as a decode step does with its buffers; count the
# page faults that cost.
SCRIPT = """
import ctypes, json, resource, sys
from whale.core.allocator import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
size = int(sys.argv[2])
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(ctypes.c_void_p(block))
print(json.dumps({"kept": kept, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def faults(mode: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in USER_SETTINGS and k != "GLIBC_TUNABLES"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(BLOCK)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_freed_blocks_are_reused_instead_of_faulted_in_again():
    default, kept = faults("default"), faults("keep")
    assert default["faults"] > 15 * PAGES  # each round maps and faults the block afresh
    assert kept["kept"] is True
    assert kept["faults"] < 2 * PAGES  # faulted once, then reused


def test_a_users_own_malloc_setting_is_left_alone():
    result = faults("keep", MALLOC_TRIM_THRESHOLD_="131072")
    assert result["kept"] is False


RELEASE = """
import ctypes, json, sys
from whale.core.allocator import keep_freed_memory, release_freed_memory
keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
size = int(sys.argv[1])
block = libc.malloc(size)
ctypes.memset(block, 1, size)
libc.free(ctypes.c_void_p(block))
kept = resident()
release_freed_memory()
print(json.dumps({"kept": kept, "released": resident()}))
"""


def test_released_memory_leaves_the_process():
    clean = {k: v for k, v in os.environ.items() if k not in USER_SETTINGS and k != "GLIBC_TUNABLES"}
    out = subprocess.run(
        [sys.executable, "-c", RELEASE, str(BLOCK)], env=clean, capture_output=True, text=True, check=True
    )
    sizes = json.loads(out.stdout)
    assert sizes["kept"] - sizes["released"] > 0.9 * BLOCK  # the freed block was resident until released
