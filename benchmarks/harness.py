"""Timing and peak memory, the same way for every candidate and baseline.

Timing alternates candidate and baseline (so a slow patch of the machine hits both),
after warm-up runs, and reports each side's median; on CUDA each call is followed by a
device synchronisation, inside the timed span. Peak memory is measured in a separate run:
on the CPU under the PyTorch profiler (``profile_memory=True``: the highest running total
of the bytes the CPU allocator handed out during one call, above what was held before it;
no tracemalloc, which does not see torch's allocator), on CUDA with the caching
allocator's ``max_memory_allocated`` above what was allocated before the call.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile


def _sync(device) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def alternate(candidate: Callable[[], object], baseline: Callable[[], object], repeats: int,
              warmup: int = 1, device=None) -> tuple[float, float]:
    """Median seconds of candidate() and baseline(), run alternately."""
    for _ in range(warmup):
        candidate()
        baseline()
    _sync(device)
    c, b = [], []
    for _ in range(repeats):
        for fn, out in ((candidate, c), (baseline, b)):
            start = time.perf_counter()
            fn()
            _sync(device)
            out.append(time.perf_counter() - start)
    return statistics.median(c), statistics.median(b)


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 1, device=None) -> float:
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@contextlib.contextmanager
def quiet_stderr():
    """The profiler's C++ side logs to file descriptor 2; keep the table readable."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def peak_bytes(fn: Callable[[], object], device=None) -> int:
    """Peak bytes allocated during fn(), net of what was allocated before it: by the CPU
    allocator (profiler memory events), or on CUDA by the caching allocator."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    total = peak = 0
    for _, nbytes in events:
        total += nbytes
        peak = max(peak, total)
    return peak
