"""The study's contract: what one run is, what it gives back, and the two calls that make
and execute runs (``plan`` and ``execute``).

A ``Run`` is one model on one task with all its seeds (and learning-rate grid), trained
together as one batched ensemble by ``execute``; its ``SeedResult`` per seed is what the
store keeps, keyed by ``Run.key(seed)``: (model hash, task, seed, protocol version,
supervised). ``plan`` turns a profile (and optional user specs) into runs and the skips
that say why a model cannot run a task.

No torch here: ``execute`` imports it (lazily, in ``runner``) and sets one thread."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from .protocol import PROTOCOL_VERSION

__all__ = ["PROTOCOL_VERSION", "Run", "Skip", "SeedResult", "StudyError", "plan", "execute"]


class StudyError(Exception):
    """A user's mistake in a study (an unknown task or profile, a spec no task fits):
    the CLI prints ``error: message`` and the hint, never a traceback."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message + (f" (hint: {self.hint})" if self.hint else "")


@dataclass(frozen=True)
class Run:
    """One model on one task, all its seeds (and learning rates) trained together."""

    source: str  # display origin: a spec path, or "slice:<task>:<dimension>=<value>"
    spec: str  # the .attn text of the model
    model: str  # the model's name inside spec
    task: str  # a name in tasks.TASKS
    seeds: tuple[int, ...]
    lrs: tuple[float, ...]
    profile: str
    supervised: bool = False  # trained with penalty = supervised(gold, λ) (survey §4)
    # Config fields set at build time (a user's spec fitted to ``params``: its width `d`)
    config: tuple[tuple[str, int], ...] = ()
    # `study run --steps`: the step budget when it is not the profile's (None: the profile's
    # steps); the warm-up and cosine schedule are laid over it (a profile with these steps)
    budget: int | None = None
    width: int | None = None  # the model's width d, recorded (None: the spec's own)
    # `study run --input x=doc`: the task's tensor -> the spec's input that reads it (empty:
    # each tensor reads the input of its own name)
    inputs: tuple[tuple[str, str], ...] = ()

    def model_hash(self) -> str:
        """sha256 of the spec text, the model's name (and the Config fields it sets, and a
        step budget other than the profile's): the model as trained, wherever it came from."""
        h = hashlib.sha256(self.spec.encode("utf-8"))
        h.update(b"\0" + self.model.encode("utf-8"))
        for k, v in self.config:
            h.update(f"\0{k}={v}".encode("utf-8"))
        if self.budget is not None:
            h.update(f"\0steps={self.budget}".encode("utf-8"))
        for task, spec in self.inputs:
            h.update(f"\0input:{task}={spec}".encode("utf-8"))
        return h.hexdigest()

    def key(self, seed: int) -> str:
        """The store's key of one seed: (model hash, task, seed, protocol version,
        supervised)."""
        sup = "sup" if self.supervised else "plain"
        return f"{self.model_hash()[:32]}:{self.task}:{seed}:{PROTOCOL_VERSION}:{sup}"


@dataclass(frozen=True)
class Skip:
    """A model that cannot run a task (or a spec with no model to run), and why."""

    source: str
    model: str
    task: str | None
    why: str


@dataclass
class SeedResult:
    """The measures of one seed of a run (json-able through ``dataclasses.asdict``)."""

    seed: int
    lr: float  # the best learning rate of the grid for this seed (zoology: best of grid)
    params: int
    steps: int  # steps trained (fewer than the protocol's when it stopped at the threshold)
    steps_to_threshold: int | None  # first step whose accuracy reached the threshold
    seconds: float  # wall time of the run divided among its seeds
    seconds_per_step: float
    accuracy: float  # on the test batch, at the last evaluation (the stop or the end)
    final_loss: float
    row: dict[str, str] = field(default_factory=dict)  # Table III labels, as classify --format json
    # gold_mass, aer, comprehensiveness, sufficiency, uniform_drop (None: does not apply)
    attention: dict[str, float | None] = field(default_factory=dict)
    val_accuracy: float | None = None  # on the validation batch (what chose the lr, the stop)
    # the learning curve: (step, test accuracy) at each evaluation until the stop
    curve: list[tuple[int, float]] = field(default_factory=list)
    budget: int | None = None  # the step budget it trained under (the profile's, or --steps)
    width: int | None = None  # the model's width d (--width, --params or the profile's)


def plan(profile: str, specs: list[str] | None = None, params: int | None = None,
         tasks: list[str] | None = None, steps: list[int] | None = None,
         widths: list[int] | None = None,
         inputs: tuple[tuple[str, str], ...] = (),
         sets: tuple[tuple[str, int], ...] = ()) -> tuple[list[Run], list[Skip]]:
    """The runs of a profile (or of the user's ``specs``) and the skips, in a fixed order;
    ``steps`` and ``widths`` sweep the step budget and the width (every combination);
    ``inputs`` maps the task's tensors onto the specs' inputs (``--input``), ``sets``
    sets their Config fields (``--set``)."""
    from . import plan as _plan

    return _plan.plan(profile, specs, params, tasks, steps, widths, inputs, sets)


def execute(run: Run) -> list[SeedResult]:
    """Train ``run`` under the protocol and measure it; deterministic (timings aside)."""
    from . import runner

    return runner.execute(run)
