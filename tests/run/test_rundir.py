import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from whale.core.config import ConfigError
from whale.run.rundir import RunDir

# A script that drives whale's API, as a user's own does: its command line names neither whale nor the
# run, so the lock cannot tell it by its name.
HOLDER = """
import sys
from pathlib import Path
from whale.run.rundir import RunDir
RunDir(Path(sys.argv[1])).claim()
print("claimed", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder(tmp_path: Path):
    script = tmp_path / "h.py"
    script.write_text(HOLDER)
    folder = tmp_path / "run"
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(
        ["agent", str(script), str(folder)], executable=sys.executable, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "claimed"
    assert b"whale" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    yield folder, proc
    proc.kill()
    proc.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process start times come from /proc")
def test_a_folder_held_by_a_live_process_is_refused_whatever_its_command_line(holder):
    folder, proc = holder
    assert RunDir(folder).running_pid() == proc.pid
    with pytest.raises(ConfigError, match=f"in use by a running whale process \\(pid {proc.pid}\\)"):
        RunDir(folder).claim()
    proc.stdin.close()
    proc.wait()
    RunDir(folder).claim()  # the holder is gone: the folder is free
    assert json.loads((folder / "run.pid").read_text())["pid"] == os.getpid()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process start times come from /proc")
def test_a_pid_file_naming_a_pid_now_used_by_another_process_is_stale(holder):
    folder, proc = holder
    held = json.loads((folder / "run.pid").read_text())
    (folder / "run.pid").write_text(json.dumps({**held, "process_start": held["process_start"] - 1}))
    assert RunDir(folder).running_pid() is None
    RunDir(folder).claim()


def test_a_pid_file_of_a_process_that_has_ended_is_stale(tmp_path: Path):
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (tmp_path / "run.pid").write_text(json.dumps({"pid": int(ended.stdout), "process_start": 1}))
    assert RunDir(tmp_path).running_pid() is None
