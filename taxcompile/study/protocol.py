"""The study's protocol, frozen and versioned.

Every result carries ``PROTOCOL_VERSION`` and the profile's settings. As zoology: AdamW
with a cosine schedule (after a short linear warm-up), the best learning rate of a grid,
training stops once the validation accuracy reaches ``THRESHOLD``. Seeds and the
learning-rate grid of one model are trained together as one batched ensemble.

Three batches are kept apart, each drawn from its own stream of the task's generator
(``task_seed(task, seed, stream)``, ``STREAMS``): the training batches; one
**validation** batch (``eval_batch`` examples) that decides the early stop and which
learning rate a seed keeps; one **test** batch (``test_batch`` examples) that only
reports: the accuracy, the attention measures and the learning curve. The seed pairs the
data across the models of a task, so the report compares them seed by seed.

Bump ``PROTOCOL_VERSION`` whenever anything that changes a metric changes (a task
generator, a size, the optimiser, a measure's definition, a profile's settings)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

# 2: validation and test batches apart; learning curves. 3: ERASER's comprehensiveness and
# sufficiency as AOPC over bins (was: the top 3 positions); the answer-bearing gold mass;
# no weight decay on scalar parameters
PROTOCOL_VERSION = "3"
THRESHOLD = 0.99  # stop at this validation accuracy (zoology)
# the generator streams of a task's seed: what each batch is drawn from
STREAMS = dict(train=1, validation=2, sampling=3, erasure=4, test=5)


def task_seed(task: str, seed: int, stream: int) -> int:
    """A fixed, process-independent generator seed per (task, seed, stream)."""
    return (sum(ord(ch) * 131 ** i for i, ch in enumerate(task)) * 7919 + seed * 101 + stream) \
        % (2 ** 62)


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
    eval_batch: int  # the validation batch's examples (early stop, learning-rate choice)
    test_batch: int  # the test batch's examples (reported only)
    weight_decay: float = 0.1
    # no decay on a model's scalar parameters: it would pull a learned temperature
    # (the similarity score's beta = exp(s)) towards 1 whatever the loss says
    decay_scalars: bool = False
    warmup: int = 10  # linear warm-up steps before the cosine decay
    clip: float = 1.0  # gradient norm clipped per member
    supervised: bool = True  # beside each base model, the same model trained with gold
    full: bool = False  # the cross product of taxcompile.combinations, not the slice
    # erasure faithfulness (ERASER's AOPC): the most attended 1, 5, 10, 20, 50 % of x
    erasure_bins: tuple[float, ...] = (0.01, 0.05, 0.1, 0.2, 0.5)

    def settings(self) -> dict:
        """What every result records of the protocol."""
        return dict(version=PROTOCOL_VERSION, threshold=THRESHOLD, optimiser="AdamW",
                    schedule="cosine", batches=self.batches(), **asdict(self))

    def batches(self) -> dict:
        """The three batches, each with its generator stream and size (per seed s of a
        task: ``task_seed(task, s, stream)``)."""
        return dict(
            train=dict(stream=STREAMS["train"], size=self.batch, use="training, a fresh "
                       "batch each step"),
            validation=dict(stream=STREAMS["validation"], size=self.eval_batch,
                            use="early stopping and the learning-rate choice"),
            test=dict(stream=STREAMS["test"], size=self.test_batch,
                      use="reported only: accuracy, attention measures, learning curve"))


LITERATURE = ("zoo_mqar_32_4", "zoo_mqar_32_8", "mad_selective_copy", "mad_fuzzy_recall",
              "mad_compression", "mad_memorization")

PROFILES = {p.name: p for p in (
    # CI: minutes on 2 cores; every value of the five per-module dimensions at least once
    Profile("smoke", d=16, steps=60, batch=32, seeds=(0, 1), lrs=(1e-2,),
            tasks=("copy", "keyword", "pair_recall", "segments"), eval_every=20,
            eval_batch=128, test_batch=128),
    # hours on a 2-core machine; five seeds: the paired t interval needs them (docs/study.md)
    Profile("slice", d=32, steps=600, batch=64, seeds=(0, 1, 2, 3, 4), lrs=(3e-3, 1e-2),
            tasks=("mqar4", "mqar8", "copy", "reverse", "sort", "noisy_recall", "keyword",
                   "pair_recall", "segments"),
            eval_every=50, eval_batch=256, test_batch=512),
    # the literature's own tasks (lit_tasks, lit_models: attention, a gated convolution and
    # an LSTM as the mixer of a two-layer causal language model), widths swept with
    # --width: zoology's MQAR and mad-lab's four remaining tasks, sized for a CPU
    Profile("literature", d=32, steps=1000, batch=32, seeds=(0,), lrs=(3e-3,),
            tasks=LITERATURE, eval_every=100, eval_batch=256, test_batch=256,
            supervised=False),
    # the same tasks and models, a few steps: a test of the pipeline (seconds)
    Profile("literature_smoke", d=8, steps=4, batch=8, seeds=(0,), lrs=(3e-3,),
            tasks=LITERATURE, eval_every=2, eval_batch=16, test_batch=16, supervised=False),
    # a cluster: every valid combination of taxcompile.combinations
    Profile("full", d=64, steps=2000, batch=64, seeds=(0, 1, 2, 3, 4), lrs=(1e-3, 3e-3, 1e-2),
            tasks=("mqar4", "mqar8", "copy", "reverse", "sort", "noisy_recall", "keyword",
                   "pair_recall", "segments"),
            eval_every=100, eval_batch=512, test_batch=1024, full=True),
)}


def profile(name: str) -> Profile:
    from .runs import StudyError

    if name not in PROFILES:
        raise StudyError(f"unknown profile `{name}`", f"one of {', '.join(PROFILES)}")
    return PROFILES[name]
