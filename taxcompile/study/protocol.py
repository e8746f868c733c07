"""The study's protocol, frozen and versioned (issue 26, item 3).

Every result carries ``PROTOCOL_VERSION`` and the profile's settings. As zoology: AdamW
with a cosine schedule (after a short linear warm-up), the best learning rate of a grid,
training stops once the evaluation accuracy reaches ``THRESHOLD``. Seeds and the
learning-rate grid of one model are trained together as one batched ensemble.

Bump ``PROTOCOL_VERSION`` whenever anything that changes a metric changes (a task
generator, a size, the optimiser, a measure's definition, a profile's settings)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

PROTOCOL_VERSION = "1"
THRESHOLD = 0.99  # stop at this evaluation accuracy (zoology)


@dataclass(frozen=True)
class Profile:
    name: str
    d: int  # model width (``params`` refits it)
    steps: int  # training steps at most
    batch: int
    seeds: tuple[int, ...]
    lrs: tuple[float, ...]  # the grid: each seed keeps its best learning rate
    tasks: tuple[str, ...]  # the tasks of the taxonomy slice
    eval_every: int  # steps between evaluations (for the stop and steps-to-threshold)
    eval_batch: int
    weight_decay: float = 0.1
    warmup: int = 10  # linear warm-up steps before the cosine decay
    clip: float = 1.0  # gradient norm clipped per member
    supervised: bool = True  # beside each base model, the same model trained with gold
    full: bool = False  # the cross product of taxcompile.combinations, not the slice
    top_k: int = 3  # erasure faithfulness: the k most attended positions

    def settings(self) -> dict:
        """What every result records of the protocol."""
        return dict(version=PROTOCOL_VERSION, threshold=THRESHOLD, optimiser="AdamW",
                    schedule="cosine", **asdict(self))


PROFILES = {p.name: p for p in (
    # CI: minutes on 2 cores; every value of the five per-module dimensions at least once
    Profile("smoke", d=16, steps=60, batch=32, seeds=(0, 1), lrs=(1e-2,),
            tasks=("copy", "keyword", "pair_recall", "segments"), eval_every=20,
            eval_batch=128),
    # about an hour on a 2-core machine
    Profile("slice", d=32, steps=600, batch=64, seeds=(0, 1, 2), lrs=(3e-3, 1e-2),
            tasks=("mqar4", "mqar8", "copy", "reverse", "sort", "noisy_recall", "keyword",
                   "pair_recall", "segments"),
            eval_every=50, eval_batch=256),
    # a cluster: every valid combination of taxcompile.combinations
    Profile("full", d=64, steps=2000, batch=64, seeds=(0, 1, 2, 3, 4), lrs=(1e-3, 3e-3, 1e-2),
            tasks=("mqar4", "mqar8", "copy", "reverse", "sort", "noisy_recall", "keyword",
                   "pair_recall", "segments"),
            eval_every=100, eval_batch=512, full=True),
)}


def profile(name: str) -> Profile:
    from .runs import StudyError

    if name not in PROFILES:
        raise StudyError(f"unknown profile `{name}`", f"one of {', '.join(PROFILES)}")
    return PROFILES[name]
