"""A stand-in for ``runs.plan`` / ``runs.execute`` in the engine's tests: runs that take a
moment and give metrics that are a pure function of the run and seed, so that the store,
the engines and the resume logic are tested without training (tests/test_study_engine.py).

Each execution appends ``KEY`` to the file named by $STUDY_FAKE_LOG (one O_APPEND write
per line), so that a test can count how often each run was really executed."""

from __future__ import annotations

import hashlib
import os
import time

from taxcompile.study.runs import Run, SeedResult, Skip

BASE = {"feature_multiplicity": "Singular", "feature_levels": "Single-Level",
        "feature_representations": "Single-Representational", "scoring": "Additive",
        "alignment": "Global", "dimensionality": "Single-Dimensional", "query_type": "Basic",
        "query_multiplicity": "Singular"}
# one factor at a time around the base, as the slice; the last model changes two
VARIANTS = [{}, {"scoring": "Multiplicative"}, {"scoring": "General"},
            {"alignment": "Sparse"}, {"dimensionality": "Multi-Dimensional"},
            {"query_type": "Self-Attentive"}, {"query_multiplicity": "Multi-Head"},
            {"scoring": "Multiplicative", "alignment": "Sparse"}]


def row_of(run: Run) -> dict[str, str]:
    return {**BASE, **VARIANTS[int(run.model[1:])]}


def plan(profile, specs=None, params=None, tasks=None, steps=None, widths=None,
         n=len(VARIANTS), seeds=(0, 1, 2)):
    """The fake runs, each under every step budget of ``steps`` (``--steps``; the budget
    None: the profile's, 100 here) at every width of ``widths``."""
    runs = [Run(source=f"fake:{i}", spec=f"fake spec {i}", model=f"m{i}", task="copy",
                seeds=tuple(seeds), lrs=(1e-3,), profile=profile, budget=b, width=w)
            for i in range(n) for b in (steps or [None]) for w in (widths or [None])]
    return runs, [Skip("fake:9", "m9", "mqar4", "no token input")]


def _unit(*parts) -> float:
    h = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:6], "big") / 2 ** 48


def execute(run: Run) -> list[SeedResult]:
    delay = float(os.environ.get("STUDY_FAKE_DELAY", "0"))
    start = time.perf_counter()
    time.sleep(delay)
    log = os.environ.get("STUDY_FAKE_LOG")
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{run.key(run.seeds[0])}\n".encode())
        os.close(fd)
    out = []
    budget = run.budget or 100
    for seed in run.seeds:
        key = run.key(seed)
        acc = 0.5 + 0.4 * _unit(key, "acc")
        seconds = time.perf_counter() - start
        out.append(SeedResult(
            seed=seed, lr=run.lrs[0], params=1000 + int(run.model[1:]),
            steps=budget if acc < 0.8 else budget // 2,
            steps_to_threshold=None if acc < 0.8 else budget // 2, seconds=seconds,
            seconds_per_step=seconds / budget, accuracy=acc, final_loss=1 - acc,
            row=row_of(run),
            attention={"gold_mass": _unit(key, "gold"), "aer": _unit(key, "aer"),
                       "comprehensiveness": None, "sufficiency": None,
                       "uniform_drop": 0.1},
            val_accuracy=acc, curve=[(budget // 2, acc / 2), (budget, acc)], budget=budget,
            width=run.width))
    return out
