"""The report's synthetic tasks (``train.Task``) as data for ``fit``: batches in the
``(inputs, target)`` form the model's own ``loss`` takes, with a decoder's target the
token sequence it is fed (teacher forcing: its loss shifts it). A task whose targets the
model's loss cannot read (a pointer over positions, several outputs, a model without a
``loss``, hard attention) keeps the report's loss (``train._loss``: cross-entropy per
output, REINFORCE for hard attention) with the attention penalties added."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import train
from .fitting_parts import accuracy_of

EVAL_BATCHES = 4


@dataclass
class Synthetic:
    """What ``fit`` needs for a task: ``data(step) -> batch``, held-out batches, the loss
    and the metric (None: the model's own)."""
    task: str
    data: Callable
    eval_data: list
    loss: Callable | None
    metric: Callable | None

    @property
    def describe(self) -> str:
        return train.TASKS[self.task]


def synthetic(model, mod, cm, source: str, batch: int = train.BATCH, seed: int = 0
              ) -> Synthetic:
    """``model``'s synthetic task (``train.Task``) at batch size ``batch``: training batch
    ``step`` is drawn from its own seed, so a run (and a resumed run) sees the same ones;
    the held-out batches have seeds no training batch has."""
    import torch

    task, names = train.task_of(model, mod, cm, source)
    if task.task == "none":
        raise ValueError(f"model `{cm.model.name}` has no output to train")
    _, probe = task.batch(torch.Generator().manual_seed(0), 2)
    own = _own_loss(model, mod, task, probe)
    convert = (lambda x, t: _for_model(task, x, t)) if own else (lambda x, t: (x, t))

    def data(step: int):
        g = torch.Generator().manual_seed((seed * 1_000_003 + step) % (1 << 63))
        return convert(*task.batch(g, batch))

    held = [convert(*task.batch(torch.Generator().manual_seed(
        train.HELDOUT_SEED * 7_919 + seed * 101 + i), 64)) for i in range(EVAL_BATCHES)]
    if own:
        return Synthetic(task.task, data, held, None, None)
    return Synthetic(task.task, data, held, lambda out, t: _task_loss(out, names, t),
                     lambda out, t: _task_accuracy(out, names, t))


def _own_loss(model, mod, task, targets: dict) -> bool:
    """Whether the model's generated ``loss`` reads the task's one target (and is all its
    loss: with hard attention it adds the REINFORCE term itself)."""
    if accuracy_of(model) is None or len(targets) != 1:
        return False
    (_, (_, how)), = targets.items()
    return how == "ce" and len(task.outputs) == 1


def _for_model(task, x: dict, targets: dict):
    """(inputs, target) for the model's loss; a decoder's target is its input sequence
    with the positions to skip at -100 (its loss compares position t's logits with token
    t + 1)."""
    import torch

    (y, _), = targets.values()
    if task.task in ("reverse", "copy", "describe"):
        first = torch.full_like(y[:, :1], train.BOS)
        return x, torch.cat([first, y[:, :-1]], 1)
    return x, y


def _task_loss(out, names, targets):
    loss = train._loss(out, names, targets)
    penalty = getattr(out, "penalty", None)
    return loss if penalty is None else loss + penalty


def _task_accuracy(out, names, targets) -> tuple[int, int]:
    got = train._outputs(out, names)
    correct = total = 0
    for name, (y, how) in targets.items():
        z = got[name]
        if how == "point":
            pred = z.flatten(1).argmax(-1)
        else:
            pred = z.argmax(-1)
        keep = y != -100
        correct += int(((pred == y) & keep).sum())
        total += int(keep.sum())
    return correct, total


def load(spec, model: str | None = None):
    """(generated module, checked model, generated source) of ``spec``'s variant ``model``
    (a path or spec text; ``api.module``'s errors)."""
    from . import api, built, codegen

    cs, name = api.load(spec)
    cm = api._choose(cs, model)
    source = codegen.generate(cs, cm, name)
    return built.load(source, codegen.output_name(cs, cm)[:-3]), cm, source
