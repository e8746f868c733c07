"""Stages with a hard time budget each: a stage runs in a child process that is killed when
its budget runs out, so a slow stage is cut and the run goes on with the next one.

A stage is a function ``stage(ctx)`` that calls ``ctx.emit(row)`` for each result as soon as
it has it; the rows go to a JSON-lines file, one line each, so that a stage cut half-way
keeps the rows it finished. On the CPU the child is forked (torch is imported once, in the
parent); on CUDA it is spawned, since a forked child cannot use CUDA (the parent never
touches the device).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass
class Context:
    """What a stage gets: where it runs and where its rows go."""

    device: str  # "cpu" or "cuda"
    small: bool  # the CPU run's sizes
    rows_path: str
    options: dict  # stage options from the command line (e.g. models=...)

    def emit(self, row: dict) -> None:
        with open(self.rows_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _child(fn: Callable[[Context], None], ctx: Context, done_path: str) -> None:
    try:
        fn(ctx)
    except BaseException as e:  # the stage's failure is reported, not raised in the parent
        ctx.emit({"stage_error": f"{type(e).__name__}: {e}",
                  "traceback": traceback.format_exc(limit=8)})
        raise SystemExit(1)
    Path(done_path).write_text("done", encoding="utf-8")


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by the kill
            pass
    return rows


def run_stage(name: str, fn: Callable[[Context], None], budget_s: float, device: str,
              small: bool, workdir: Path, options: dict | None = None,
              method: str | None = None) -> dict:
    """Run ``fn`` in a child process for at most ``budget_s`` seconds of wall time. Returns
    {stage, status ("ok" | "error" | "cut"), seconds, budget_s, rows, error?}; a cut stage's
    child is killed (SIGTERM, then SIGKILL) and reaped before this returns."""
    workdir.mkdir(parents=True, exist_ok=True)
    rows_path, done_path = workdir / f"{name}.jsonl", workdir / f"{name}.done"
    for p in (rows_path, done_path):
        p.unlink(missing_ok=True)
    ctx = Context(device, small, str(rows_path), dict(options or {}))
    method = method or ("spawn" if device == "cuda" else "fork")
    proc = mp.get_context(method).Process(target=_child, args=(fn, ctx, str(done_path)),
                                          name=f"gpu-check-{name}", daemon=True)
    start = time.perf_counter()
    proc.start()
    proc.join(budget_s)
    cut = proc.is_alive()
    if cut:
        proc.terminate()
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join()
    seconds = time.perf_counter() - start
    rows = read_rows(rows_path)
    errors = [r for r in rows if "stage_error" in r]
    rows = [r for r in rows if "stage_error" not in r]
    out = {"stage": name, "seconds": round(seconds, 2), "budget_s": budget_s, "rows": rows,
           "pid": proc.pid}
    if cut:
        out.update(status="cut", error=f"cut at its budget of {budget_s:g} s "
                                       f"({len(rows)} rows finished before the cut)")
    elif errors or not done_path.exists():
        e = errors[0] if errors else {"stage_error": f"exit code {proc.exitcode}"}
        out.update(status="error", error=e["stage_error"], traceback=e.get("traceback", ""))
    else:
        out["status"] = "ok"
    return out
