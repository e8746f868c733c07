"""``taxcompile.fit``: train a model with AdamW, a linear warm-up and a cosine decay,
gradient clipping, a held-out evaluation, early stopping and a checkpoint that resumes
exactly.

A batch is ``(inputs, *loss_args)``: ``inputs`` the keyword arguments of ``forward()``
(named and shaped as the model's ``example_inputs`` gives them), ``loss_args`` what the
loss takes after the model's output: for a generated model's own ``loss(out, target,
mask=None)``, ``(inputs, target)`` or ``(inputs, target, mask)``. A decoder's target is
the token sequence it was given (``target = inputs["tgt"]``, padding at -100 or masked):
its loss shifts it, the logits at position t predict token t + 1 (teacher forcing).

Deterministic: the same seed, model, data and thread count give the same losses, bit for
bit; a run resumed from its checkpoint gives the same losses as one that was never
stopped (the checkpoint holds the model, the optimiser, the schedule, the random number
generators and the step; it is written to a temporary file and renamed, so it is never
half-written). Exact resumption needs data that is the same on every pass: a list of
batches, a function of the step (``data(step) -> batch``) or an iterable that repeats."""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import threads as threads_mod
from .fitting_parts import Progress, accuracy_of, batch_parts, lr_factor

FORMAT = 1  # the checkpoint's layout; a checkpoint of another layout is refused


@dataclass
class History:
    """What ``fit`` did: the training loss and learning rate of every step, the held-out
    metrics of every evaluation (``{"step", "loss", "accuracy"?}``), and why it stopped."""
    losses: list = field(default_factory=list)
    lrs: list = field(default_factory=list)
    evals: list = field(default_factory=list)
    steps: int = 0
    stopped: str = ""  # "steps", "early stopping", "data ran out"
    seconds: float = 0.0  # training time of this call (a resumed run: since it resumed)
    threads: int = 0  # torch threads of this call
    examples: int = 0  # examples seen by this call
    trained: int = 0  # steps taken by this call

    @property
    def best(self) -> dict | None:
        """The evaluation with the lowest held-out loss."""
        return min(self.evals, key=lambda e: e["loss"]) if self.evals else None

    @property
    def steps_per_second(self) -> float:
        return self.trained / self.seconds if self.seconds else 0.0

    def state(self) -> dict:
        return dict(losses=self.losses, lrs=self.lrs, evals=self.evals, steps=self.steps,
                    stopped=self.stopped)


@dataclass
class _Settings:
    steps: int
    warmup: int
    lr: float
    min_lr: float
    eval_every: int
    patience: int | None
    min_delta: float


def fit(model, data, *, steps: int | None = None, epochs: int = 1, lr: float = 1e-3,
        weight_decay: float = 0.01, betas: tuple = (0.9, 0.999), warmup: float = 0.05,
        min_lr: float = 0.0, clip: float | None = 1.0, eval_data=None, holdout: float = 0.0,
        eval_every: int | None = None, patience: int | None = None, min_delta: float = 0.0,
        loss: Callable | None = None, metric: Callable | None = None, seed: int = 0,
        checkpoint: str | os.PathLike | None = None, checkpoint_every: int | None = None,
        progress: bool | None = None, threads: int | None = None,
        meta: dict | None = None, on_resume: Callable | None = None) -> History:
    """Train ``model`` on ``data`` (batches ``(inputs, *loss_args)``, see the module's
    docstring) and return its ``History``.

    steps: optimiser steps (default: ``epochs`` passes over ``data``, which then needs a
    length); a list or other re-iterable is passed over again as needed. lr: the peak
    learning rate, reached after ``warmup`` steps (a fraction of ``steps`` when below 1)
    and decayed along a cosine to ``min_lr`` at the last step. weight_decay, betas: AdamW's.
    clip: the largest gradient norm (None: no clipping).
    eval_data: held-out batches, evaluated every ``eval_every`` steps (default: ten times
    a run) and at the end; or ``holdout``: that fraction of a list's batches, kept out of
    training. patience: stop after that many evaluations without a held-out loss lower than
    the best by ``min_delta``.
    loss: ``loss(out, *loss_args) -> tensor`` (default: the model's own ``loss``; a
    generated model adds its attention penalties there). metric: ``metric(out, *loss_args)
    -> (correct, total)`` for the held-out accuracy (default: the arg-max of a generated
    model's logits against its target).
    seed: seeds torch's and Python's generators at the start (a fresh run). checkpoint: a
    file written every ``checkpoint_every`` steps (default: at every evaluation) and at
    the end; when it exists, training resumes from it. progress: a progress bar on stderr
    (default: when stderr is a terminal). threads: torch threads (default: the
    ``TORCH_NUM_THREADS`` / ``OMP_NUM_THREADS`` set, else the cores the machine's load
    leaves free). meta: plain values stored in the checkpoint (``taxcompile train`` puts
    the spec, the model's name and its Config there). on_resume: called with the step a run
    resumes at. The model is left in eval mode. A loss that is not finite stops the run
    with a ValueError naming the step (the checkpoint keeps the last good state)."""
    import torch

    data, eval_data = _split(data, eval_data, holdout)
    if eval_data is not None and iter(eval_data) is eval_data:  # one pass: keep it
        eval_data = list(eval_data)
    total = _total_steps(data, steps, epochs)
    loss_fn = loss if loss is not None else _model_loss(model)
    metric = metric if metric is not None else (accuracy_of(model) if loss is None else None)
    every = eval_every or max(1, total // 10)
    s = _Settings(total, _warmup_steps(warmup, total), float(lr), float(min_lr), every,
                  patience, float(min_delta))
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    opt = torch.optim.AdamW(params, lr=s.lr, betas=tuple(betas), weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: lr_factor(i, s.steps, s.warmup, s.min_lr / s.lr if s.lr else 0.0))
    history, watch = History(), {"best": math.inf, "bad": 0}
    path = Path(checkpoint) if checkpoint is not None else None
    n, why = threads_mod.choose(threads)
    if path is not None and path.exists():
        saved = _resume(path, model, opt, sched, history, watch, s)
        # the resumed run's thread count (sums split across threads round differently),
        # unless the user asked for one
        n = saved if threads_mod.FROM_LOAD in why else n
        if on_resume is not None:
            on_resume(history.steps)
    else:
        torch.manual_seed(seed)
        random.seed(seed)
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(n)
    history.threads = n
    bar = Progress(total, enabled=progress)
    try:
        _loop(model, data, eval_data, opt, sched, loss_fn, metric, clip, s, history, watch,
              path, checkpoint_every or every, (n, meta or {}), bar)
    finally:
        bar.close()
        torch.set_num_threads(saved_threads)
    model.eval()
    return history


def _loop(model, data, eval_data, opt, sched, loss_fn, metric, clip, s, history, watch,
          path, save_every, extra, bar) -> None:
    import torch

    params = [p for g in opt.param_groups for p in g["params"]]
    device = params[0].device
    batches = _batches(data, history.steps)
    model.train()
    start = time.perf_counter()
    while history.steps < s.steps and not history.stopped:
        try:
            batch = next(batches)
        except StopIteration:
            history.stopped = "data ran out"
            break
        inputs, rest = batch_parts(batch, history.steps, device)
        out = model(**inputs)
        value = loss_fn(out, *rest)
        got = float(value.detach())
        if not math.isfinite(got):
            raise ValueError(f"step {history.steps + 1}: the loss is {got}; a lower lr or a "
                             "clip may help")
        opt.zero_grad(set_to_none=True)
        value.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        history.lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        history.steps += 1
        history.losses.append(got)  # (the loss before this step's update)
        history.examples += _size(inputs)
        history.trained += 1
        history.seconds = time.perf_counter() - start
        if history.steps == s.steps:
            history.stopped = "steps"
        ev = None
        if eval_data is not None and (history.steps % s.eval_every == 0 or history.stopped):
            ev = evaluate(model, eval_data, loss_fn, metric)
            ev["step"] = history.steps
            history.evals.append(ev)
            model.train()
            if _stop_early(ev["loss"], watch, s):
                history.stopped = "early stopping"
        bar.update(history, ev)
        if path is not None and (history.steps % save_every == 0 or history.stopped):
            save(path, model, opt, sched, history, watch, *extra)


def evaluate(model, batches, loss: Callable | None = None, metric: Callable | None = None
             ) -> dict:
    """The mean loss over ``batches`` (and the accuracy, ``metric``'s correct / total), in
    eval mode without gradients: ``{"loss": …, "accuracy": …}``."""
    import torch

    loss = loss if loss is not None else _model_loss(model)
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    total, count, correct, seen = 0.0, 0, 0, 0
    try:
        with torch.no_grad():
            for i, batch in enumerate(batches):
                inputs, rest = batch_parts(batch, i, device)
                out = model(**inputs)
                total += float(loss(out, *rest))
                count += 1
                if metric is not None:
                    c, t = metric(out, *rest)
                    correct, seen = correct + int(c), seen + int(t)
    finally:
        model.train(was)
    if not count:
        raise ValueError("no held-out batches to evaluate")
    ev = {"loss": total / count}
    if metric is not None and seen:
        ev["accuracy"] = correct / seen
    return ev


def _stop_early(value: float, watch: dict, s: _Settings) -> bool:
    if value < watch["best"] - s.min_delta:
        watch["best"], watch["bad"] = value, 0
        return False
    watch["bad"] += 1
    return s.patience is not None and watch["bad"] >= s.patience


# ---- the checkpoint


def save(path: Path, model, opt, sched, history: History, watch: dict, n_threads: int,
         meta: dict) -> None:
    """Everything a run needs to go on exactly, written atomically (a temporary file in the
    same directory, then renamed over ``path``)."""
    import torch

    state = dict(format=FORMAT, model=model.state_dict(), optimizer=opt.state_dict(),
                 scheduler=sched.state_dict(), history=history.state(), watch=dict(watch),
                 threads=n_threads, meta=meta, torch_rng=torch.get_rng_state(),
                 python_rng=random.getstate(),
                 cuda_rng=torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_checkpoint(path: str | os.PathLike) -> dict:
    """A checkpoint's contents (tensors and plain values only: ``weights_only`` loading,
    so a file from elsewhere cannot run code); a ValueError saying why a file is not one."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as e:
        raise ValueError(f"{path}: not a taxcompile checkpoint ({type(e).__name__})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path}: not a taxcompile checkpoint of this version")
    return state


def _resume(path, model, opt, sched, history, watch, s) -> int:
    """Restore a run from its checkpoint; its thread count."""
    import torch

    state = load_checkpoint(path)
    why = _mismatch(model.state_dict(), state["model"])
    if why:
        raise ValueError(f"{path}: the checkpoint is of another model ({why})")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    h = state["history"]
    history.losses, history.lrs, history.evals = list(h["losses"]), list(h["lrs"]), list(h["evals"])
    history.steps, history.stopped = int(h["steps"]), h["stopped"]
    watch.update(state["watch"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(_tuples(state["python_rng"]))
    if state["cuda_rng"]:
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    if history.steps > s.steps:
        raise ValueError(f"{path}: the checkpoint is at step {history.steps}, past the "
                         f"{s.steps} steps asked for")
    if history.stopped != "early stopping" and history.steps < s.steps:
        history.stopped = ""  # more steps asked for than the run it resumes
    return int(state["threads"])


def _mismatch(mine: dict, saved: dict) -> str:
    """The first difference between the model's weights and a checkpoint's ("" if none)."""
    for k, v in mine.items():
        if k not in saved:
            return f"it has no `{k}`"
        if tuple(saved[k].shape) != tuple(v.shape):
            return f"`{k}` is {tuple(saved[k].shape)} there, {tuple(v.shape)} here"
    extra = [k for k in saved if k not in mine]
    return f"it has `{extra[0]}`, which this model does not" if extra else ""


def _tuples(x):
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


# ---- data


def _split(data, eval_data, holdout: float):
    if not holdout:
        return data, eval_data
    if not 0 < holdout < 1:
        raise ValueError(f"holdout: expected a fraction between 0 and 1, got {holdout!r}")
    if eval_data is not None:
        raise ValueError("give eval_data or holdout, not both")
    if not isinstance(data, (list, tuple)):
        raise ValueError("holdout needs data as a list of batches (to set some aside)")
    k = max(1, round(len(data) * holdout))
    if k >= len(data):
        raise ValueError(f"holdout = {holdout} leaves no batch of the {len(data)} to train on")
    return list(data[:-k]), list(data[-k:])


def _total_steps(data, steps, epochs) -> int:
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps: expected a positive whole number, got {steps!r}")
        return steps
    if callable(data) and not hasattr(data, "__iter__"):
        raise ValueError("data is a function of the step: give steps=")
    try:
        n = len(data)
    except TypeError:
        raise ValueError("data has no length: give steps=") from None
    if n < 1 or epochs < 1:
        raise ValueError("no steps to train: the data is empty or epochs < 1")
    return n * epochs


def _warmup_steps(warmup, total: int) -> int:
    if warmup < 0:
        raise ValueError(f"warmup: expected steps or a fraction >= 0, got {warmup!r}")
    return min(total, int(round(warmup * total)) if warmup < 1 else int(warmup))


def _batches(data, skip: int):
    """The batches from step ``skip`` on: a function of the step is called with it; an
    iterable is passed over again when it ends (unless it is an iterator: then it ends)."""
    if callable(data) and not hasattr(data, "__iter__"):
        step = skip
        while True:
            yield data(step)
            step += 1
    seen = 0
    while True:
        it = iter(data)
        fresh = False
        for b in it:
            fresh = True
            if seen >= skip:
                yield b
            seen += 1
        if it is data or not fresh:  # an iterator (one pass) or an empty iterable
            return


def _size(inputs: dict) -> int:
    for v in inputs.values():
        if hasattr(v, "shape") and len(v.shape):
            return int(v.shape[0])
    return 0


def _model_loss(model) -> Callable:
    fn = getattr(model, "loss", None)
    if not callable(fn):
        raise ValueError(f"{type(model).__name__} has no loss() (no output is a classify); "
                         "give fit a loss=: loss(out, *loss_args) -> tensor")
    return fn
