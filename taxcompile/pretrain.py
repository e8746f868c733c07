"""The report's heatmap models trained in parallel, one process per core, into the training
cache (``train.cache_dir()``); the report then reads every model's weights from there.

Each model trains single-threaded at toy sizes (``train.train``), so a pool of processes
is what uses a machine's cores: ``taxcompile report --jobs N`` (``make demo`` passes the
number of cores). The stdlib's ``concurrent.futures`` process pool, started with "spawn"
(torch is not safe across ``fork``); a worker imports the spec and the generated module
itself, so only paths, names and source text cross the process boundary."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import time
from pathlib import Path


def _train_one(spec: str, model: str, source: str, name: str, steps: int, cache: str):
    """In a worker: train one model into the cache; (steps, from the cache, seconds)."""
    import torch

    from . import built, pipeline, train

    torch.set_num_threads(1)
    start = time.perf_counter()
    cm = next(cm for cm in pipeline.load(spec).models if cm.model.name == model)
    t = train.train(built.load(source, name), cm, source, steps, Path(cache))
    return t.steps, t.cached, time.perf_counter() - start


def warm(jobs: list[tuple[str, str, str, str]], steps: int, cache: Path, workers: int,
         say) -> None:
    """Train ``jobs`` ((spec path, model, generated source, module name) each) in
    ``workers`` processes; a progress line per model, as each finishes. A model that fails
    here is left to the report, which says why it has no heatmap."""
    start = time.perf_counter()
    # the biggest models first (the generated source's length stands for the cost): a big
    # one left for last trains alone while the other workers idle (QANet's was ~20 s)
    jobs = sorted(jobs, key=lambda job: -len(job[2]))
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
        futures = {pool.submit(_train_one, *job, steps, str(cache)): job for job in jobs}
        for done, future in enumerate(cf.as_completed(futures), 1):
            what = futures[future][3]
            try:
                n, cached, took = future.result()
                how = "from the cache" if cached else f"{n} steps, {took:.1f} s"
            except Exception as e:  # noqa: BLE001 - the report says it again, per model
                how = f"failed ({type(e).__name__})"
            left = (time.perf_counter() - start) / done * (len(jobs) - done)
            eta = f"; about {left:.0f} s left" if done < len(jobs) else ""
            say(f"heatmap {done}/{len(jobs)} {what}: {how}{eta}")
