"""Where runs execute: a local process pool (the default) or Ray tasks on a cluster.

Both yield each run's outcome as soon as it finishes, so that the driver stores it at
once (``store.Store.put``); neither schedules anything itself. A run is a pure function
of its ``Run`` (``runs.execute`` is deterministic), so the same run gives the same metrics
whichever engine ran it.

The worker side resolves its target by name ("module:function", by default
``runs.execute``), so that the pool's spawned processes and Ray's workers import only
what a run needs; the driver imports neither torch nor Ray unless it uses Ray."""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .runs import PROTOCOL_VERSION, Run, StudyError

EXECUTE = "taxcompile.study.runs:execute"
ENGINES = ("local", "ray")


@dataclass
class Outcome:
    """A finished run: its seed results, or why it failed (the study goes on)."""

    run: Run
    results: list | None
    error: str | None = None


def call(target: str, run: Run) -> tuple[str, list]:
    """Worker side: ``target(run)`` and the protocol version this worker trains under (a
    cluster node with another taxcompile is refused by the driver, never mixed)."""
    module, _, name = target.partition(":")
    results = getattr(importlib.import_module(module), name)(run)
    return PROTOCOL_VERSION, results


def _checked(run: Run, version: str, results: list) -> Outcome:
    if version != PROTOCOL_VERSION:
        raise StudyError(f"a worker trains under study protocol {version}, this driver under "
                         f"{PROTOCOL_VERSION}", "install the same taxcompile on every node")
    return Outcome(run, results)


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


# ---- local: a process pool -----------------------------------------------------------------


def _init_worker(parent: int) -> None:
    """One torch thread per worker (``execute`` sets it too; this also covers OpenMP
    before torch is imported), and exit when the driver is gone (SIGKILL gives it no
    chance to stop its pool), so that a killed study leaves no orphans computing."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def local(runs: list[Run], workers: int, target: str = EXECUTE) -> Iterator[Outcome]:
    """Each run in a pool of ``workers`` spawned processes (spawned, not forked: a fork of
    a process with threads or torch state is unsafe)."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    if not runs:
        return
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=max(1, min(workers, len(runs))), mp_context=ctx,
                               initializer=_init_worker, initargs=(os.getpid(),))
    try:
        pending = {pool.submit(call, target, run): run for run in runs}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                run = pending.pop(fut)
                try:
                    version, results = fut.result()
                except StudyError:
                    raise
                except Exception as e:  # the run failed; the others go on
                    yield Outcome(run, None, _error(e))
                    continue
                yield _checked(run, version, results)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# ---- Ray: one task per run on an existing cluster --------------------------------------------


RAY_HINT = "start one with `ray start --head` and pass its address (e.g. --address " \
    "10.0.0.1:6379)"


def _probe(address: str, timeout: float) -> None:
    """A TCP connection to ``address`` (``host:port`` or ``ray://host:port``) within
    ``timeout`` seconds, or a ``StudyError`` that says why not: Ray's own connect
    retries without end on an address where nothing listens."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except socket.timeout:
        raise StudyError(f"cannot connect to the Ray cluster at {address}: no answer within "
                         f"{timeout:g} s", RAY_HINT + ", or wait longer with "
                         "--connect-timeout") from None
    except OSError as e:
        raise StudyError(f"cannot connect to the Ray cluster at {address}: "
                         f"{e.strerror or e}", RAY_HINT) from None


class _NoThreadWarning:
    """Ray, initialised off the main thread, warns that it sets no SIGTERM handler: the
    driver's own handling stays as it is, which is what is wanted here."""

    @staticmethod
    def filter(record) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


def _ray_init(ray, address: str | None, timeout: float = 30.0) -> bool:
    """Connect to ``address`` (or RAY_ADDRESS, or start a local Ray), waiting at most
    ``timeout`` seconds for a cluster at an address; returns whether this call started
    the connection (and so should end it). A Ray the caller initialised (a test's local
    Ray) is used as it is."""
    import logging

    if ray.is_initialized():
        return False
    kwargs: dict = {"include_dashboard": False, "log_to_driver": False}
    target = address or os.environ.get("RAY_ADDRESS")
    if not target:
        # a Ray started here: its workers import this very taxcompile
        root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": path}}
    else:
        start = time.monotonic()
        _probe(target, timeout)
        left = max(0.1, timeout - (time.monotonic() - start))
    box: dict = {}

    def connect() -> None:
        try:
            ray.init(address=address, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the driver's thread
            box["error"] = e

    if target:  # in a thread, so that a cluster that never answers cannot hang the study
        log = logging.getLogger("ray._private.worker")
        log.addFilter(_NoThreadWarning)
        try:
            thread = threading.Thread(target=connect, name="ray-connect", daemon=True)
            thread.start()
            thread.join(left)
        finally:
            log.removeFilter(_NoThreadWarning)
        if thread.is_alive():
            raise StudyError(f"cannot connect to the Ray cluster at {target}: no answer "
                             f"within {timeout:g} s", RAY_HINT + ", or wait longer with "
                             "--connect-timeout")
    else:
        connect()
    e = box.get("error")
    if isinstance(e, (ConnectionError, RuntimeError, ValueError)):
        raise StudyError(f"cannot connect to the Ray cluster at {target}: {e}" if target
                         else f"cannot start a local Ray: {e}", RAY_HINT) from None
    if e is not None:
        raise e
    return True


def ray(runs: list[Run], address: str | None = None, target: str = EXECUTE,
        in_flight: int | None = None, timeout: float = 30.0) -> Iterator[Outcome]:
    """Each run as a Ray task (one CPU each); results taken with ``ray.wait`` as they
    finish. At most ``in_flight`` tasks are submitted at once (default: twice the
    cluster's CPUs), so that a full profile's thousands of runs do not all wait in
    Ray's queue holding their specs. A cluster at an address that does not answer within
    ``timeout`` seconds is a ``StudyError``."""
    try:
        import ray as ray_mod
    except ImportError:
        raise StudyError("the Ray engine needs Ray, which is not installed",
                         "pip install 'taxcompile[ray]' (or use --engine local)") from None
    started = _ray_init(ray_mod, address, timeout)
    try:
        remote = ray_mod.remote(num_cpus=1, max_retries=2)(call)
        limit = in_flight or max(2, 2 * int(ray_mod.cluster_resources().get("CPU", 1)))
        queue, pending = list(runs), {}
        while queue or pending:
            while queue and len(pending) < limit:
                run = queue.pop(0)
                pending[remote.remote(target, run)] = run
            done, _ = ray_mod.wait(list(pending), num_returns=1)
            run = pending.pop(done[0])
            try:
                version, results = ray_mod.get(done[0])
            except ray_mod.exceptions.RayError as e:
                cause = getattr(e, "cause", None)
                yield Outcome(run, None, _error(cause) if cause else str(e).splitlines()[0])
                continue
            yield _checked(run, version, results)
    finally:
        if started:
            ray_mod.shutdown()


# ---- progress ------------------------------------------------------------------------------


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Progress:
    """A progress bar with an ETA on stderr: redrawn in place on a terminal, one line per
    finished run otherwise (a log keeps every line)."""

    def __init__(self, total: int, stream=None, width: int = 24):
        self.total, self.done, self.failed = total, 0, 0
        self.stream = stream or sys.stderr
        self.width, self.start = width, time.monotonic()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        filled = self.width * self.done // max(1, self.total)
        eta = "" if not self.done else \
            f", ETA {_clock(elapsed / self.done * (self.total - self.done))}"
        failed = f", {self.failed} failed" if self.failed else ""
        return (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} runs"
                f"{failed}, {_clock(elapsed)} elapsed{eta}")

    def update(self, outcome: Outcome) -> None:
        self.done += 1
        self.failed += outcome.error is not None
        what = f"{outcome.run.model} on {outcome.run.task}"
        if self.tty:
            self.stream.write("\r" + self.line() + "\033[K")
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(f"{self.line()}  ({what}{': failed' if outcome.error else ''})\n")
        self.stream.flush()
