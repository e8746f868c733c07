"""The parts of ``fit`` that are not the loop: the learning-rate schedule, a batch's
checks, the held-out accuracy of a generated model and the progress bar."""

from __future__ import annotations

import inspect
import math
import re
import sys
import time

BATCH_FORM = "(inputs, target) or (inputs, target, mask), inputs a dict of forward()'s " \
             "keyword arguments"


def lr_factor(i: int, total: int, warmup: int, floor: float) -> float:
    """The learning rate of step ``i`` (0-based) as a fraction of the peak: a linear rise
    over the first ``warmup`` steps, then half a cosine from 1 down to ``floor`` at the
    last step ``total - 1``."""
    if i < warmup:
        return (i + 1) / warmup
    progress = min(1.0, (i - warmup) / max(1, total - warmup - 1))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def batch_parts(batch, i: int, device) -> tuple[dict, tuple]:
    """``(inputs, loss_args)`` of batch number ``i``, moved to ``device``; a TypeError that
    says what a batch must be when it is not one."""
    if isinstance(batch, dict):
        raise TypeError(f"batch {i}: a dict; a batch is {BATCH_FORM} (the target beside the "
                        "inputs, not among them)")
    if not isinstance(batch, (tuple, list)) or len(batch) < 2 or not isinstance(batch[0], dict):
        got = type(batch).__name__ + (f" of {len(batch)}" if isinstance(batch, (tuple, list))
                                      else "")
        raise TypeError(f"batch {i}: expected {BATCH_FORM}; got a {got}")
    bad = [k for k in batch[0] if not isinstance(k, str) or not k.isidentifier()]
    if bad:
        raise TypeError(f"batch {i}: input names must be identifiers, got {bad[0]!r}")
    return _to(batch[0], device), tuple(_to(x, device) for x in batch[1:])


def _to(x, device):
    if device is None:
        return x
    if hasattr(x, "to") and hasattr(x, "device"):
        return x if x.device == device else x.to(device)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(_to(v, device) for v in x)
    return x


def accuracy_of(model):
    """``metric(out, target, mask=None) -> (correct, total)`` for a generated model's own
    loss: the arg-max of the logits its ``loss`` reads (the Viterbi path of a CRF output)
    against the target, over the positions that count, with a decoder's shift; None for a
    model whose ``loss`` is not a generated one."""
    try:
        src = inspect.getsource(type(model).loss)
    except (AttributeError, OSError, TypeError):
        return None
    m = re.search(r"^\s*(logits|em) = out\.output(?:\['(\w+)'\])?", src, re.M)
    if m is None:
        return None
    crf, key = m.group(1) == "em", m.group(2)
    shifted = "target[:, 1:]" in src

    def metric(out, target, mask=None, ignore_index: int = -100):
        if crf:
            pred = model.decode(out, mask)
        else:
            pred = (out.output if key is None else out.output[key]).argmax(-1)
        if shifted:  # position t predicts token t + 1
            pred, target = pred[:, :-1], target[:, 1:]
            mask = None if mask is None else mask[:, 1:]
        keep = target != ignore_index
        if mask is not None:
            keep = keep & mask.bool()
        return int(((pred == target) & keep).sum()), int(keep.sum())

    return metric


class Progress:
    """One line on stderr, redrawn at most ten times a second: the step, a bar, the last
    loss, the held-out loss and accuracy, steps and examples per second. Off (``enabled``
    False, or None and stderr not a terminal) it writes nothing."""

    def __init__(self, total: int, enabled: bool | None = None, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else bool(enabled)
        self.total, self.last, self.shown, self.ev = total, 0.0, False, None

    def update(self, history, ev=None) -> None:
        if not self.enabled:
            return
        self.ev = ev or self.ev
        now = time.perf_counter()
        if now - self.last < 0.1 and history.steps < self.total and not history.stopped:
            return
        self.last = now
        self.stream.write("\r" + self.line(history) + "\x1b[K")
        self.stream.flush()
        self.shown = True

    def line(self, history) -> str:
        width = 20
        done = int(width * history.steps / self.total)
        bar = "█" * done + "·" * (width - done)
        text = f"step {history.steps}/{self.total} {bar} loss {history.losses[-1]:.4f}"
        if self.ev is not None:
            text += f" | held-out {self.ev['loss']:.4f}"
            if "accuracy" in self.ev:
                text += f" acc {self.ev['accuracy']:.3f}"
        if history.seconds:
            text += (f" | {history.trained / history.seconds:.1f} steps/s"
                     f" {history.examples / history.seconds:.0f} ex/s")
        return text

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
