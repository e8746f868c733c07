"""How many torch threads to train with: what the user set, else the cores the machine's
load leaves free. On a shared machine a torch that takes every core fights the other jobs
for them (a toy training step went from 0.7 s with one thread to 7-11 s with two at load
5-22), so the commands that train (``taxcompile train``, ``taxcompile.fit``) ask here, and
``taxcompile study run`` starts as many processes as there are free cores.

No torch import: the choice is a number, set by the caller."""

from __future__ import annotations

import math
import os

ENV = ("TORCH_NUM_THREADS", "OMP_NUM_THREADS")  # read in this order
FROM_LOAD = "cores at load"  # in the reason of a count that no one set


def cores() -> int:
    """The cores this process may run on (its affinity mask where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def load() -> float:
    """The 1-minute load average (0 where the system does not give one)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def choose(requested: int | None = None, *, environ=None, load_avg: float | None = None,
           ncores: int | None = None) -> tuple[int, str]:
    """(threads, why): ``requested`` when given, else ``TORCH_NUM_THREADS`` or
    ``OMP_NUM_THREADS`` from the environment, else ``max(1, cores - load)``: the cores the
    other jobs leave free, rounded down. A value that is not a positive whole number is a
    ValueError naming where it came from."""
    if requested is not None:
        return _positive(requested, "threads"), "as asked"
    env = os.environ if environ is None else environ
    for name in ENV:
        if env.get(name, "").strip():
            return _positive(env[name].strip(), name), f"from {name}"
    n = cores() if ncores is None else ncores
    busy = load() if load_avg is None else load_avg
    return free(n, busy), f"{n} {FROM_LOAD} {busy:.1f}"


def free(ncores: int | None = None, load_avg: float | None = None) -> int:
    """The cores the other jobs leave free: ``max(1, cores - load)``, rounded down."""
    n = cores() if ncores is None else ncores
    busy = load() if load_avg is None else load_avg
    return max(1, min(n, math.floor(n - busy)))


def _positive(value, where: str) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if isinstance(value, bool) or str(value).strip() != str(n) or n < 1:
        raise ValueError(f"{where}: expected a positive whole number of threads, got {value!r}")
    return n
