"""dtype `auto` times this model's MLP matmul in bf16 and fp32: a CPU whose bf16 is slow keeps float32.
An AVX2 machine is imitated here by capping oneDNN's and ATen's kernels at AVX2, which is what such a CPU
runs (on this Zen 4 the cap takes bf16 from 2.4-2.6x fp32's speed to 0.11-0.14x). One thread: beside
the rest of the suite, two threads' OpenMP waits once timed fp32 slower than bf16 (up to 0.37x with one
thread under four busy loops on 2 cores, 0.97x with two)."""

import json
import os
import subprocess
import sys

PROBE = """
import json, types
from whale.model.dtype_probe import bf16_pays, measured_dtype
model = types.SimpleNamespace(config=types.SimpleNamespace(hidden_size=576, intermediate_size=1536))
print(json.dumps([measured_dtype(model), bf16_pays(model)[1]]))
"""  # SmolLM2-135M's MLP shape: the probe reads only the config


def test_a_cpu_whose_kernels_stop_at_avx2_keeps_float32():
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    dtype, why = json.loads(done.stdout.splitlines()[-1])
    assert dtype == "float32"
    assert why.startswith("bf16 matmul not faster here"), why
