"""Timing and peak memory, the same way for every candidate and baseline.

Timing alternates candidate and baseline (so a slow patch of the machine hits both),
after warm-up runs, and reports each side's median. Peak memory is measured in a
separate run under the PyTorch profiler: the highest running total of the bytes the
CPU allocator handed out during one call, above what was held before it.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from typing import Callable

from torch.profiler import ProfilerActivity, profile


def alternate(candidate: Callable[[], object], baseline: Callable[[], object], repeats: int,
              warmup: int = 1) -> tuple[float, float]:
    """Median seconds of candidate() and baseline(), run alternately."""
    for _ in range(warmup):
        candidate()
        baseline()
    c, b = [], []
    for _ in range(repeats):
        for fn, out in ((candidate, c), (baseline, b)):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return statistics.median(c), statistics.median(b)


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
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


def peak_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes allocated by the CPU allocator during fn(), net of what it started with."""
    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    total = peak = 0
    for _, nbytes in events:
        total += nbytes
        peak = max(peak, total)
    return peak
