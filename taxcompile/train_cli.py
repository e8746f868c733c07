"""``taxcompile train SPEC --out CKPT``: build a model of the spec and train it with
``taxcompile.fit`` on its synthetic task (the report's, ``train.py``) or on the user's
batches, into a checkpoint that a second run resumes.

The user's data (``--data``):

- ``FILE.pt``: a list of batches saved with ``torch.save``, each ``(inputs, target)`` or
  ``(inputs, target, mask)``, ``inputs`` a dict of the model's inputs (as its
  ``example_inputs`` gives them). Read with ``weights_only=True``: tensors, dicts, lists
  and numbers only, so a file from elsewhere cannot run code. ``--holdout`` (default 0.1)
  of its batches are kept out of training and evaluated.
- ``module:function``: ``function(cfg)`` of an importable module (the current directory
  is on the path) returns the batches, a list or any iterable (a function of the step
  works too: ``batch(step)`` as ``data``, see ``fit``). This runs that module's code: it
  is yours. ``--eval-data`` gives the held-out batches the same two ways.

Torch is imported only when the command runs."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import sys
from pathlib import Path

from .argtypes import positive_int as _positive_int

EXIT_OK, EXIT_SPEC, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A one-line error of the command line (exit 2)."""


def _number(low: float, high: float | None = None, *, closed: bool = True):
    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (x >= low if closed else x > low) or (high is not None and x >= high) \
                or x != x:
            top = f" and below {high}" if high is not None else ""
            raise argparse.ArgumentTypeError(
                f"must be {'at least' if closed else 'above'} {low}{top}, got {text}")
        return x
    return parse


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("spec", metavar="SPEC", help="the .attn file")
    s.add_argument("--model", help="the model variant (needed when the spec has several)")
    s.add_argument("--out", metavar="CKPT", required=True,
                   help="the checkpoint (written atomically; when it exists, training "
                   "resumes from it)")
    s.add_argument("--steps", metavar="N", type=_positive_int, default=300,
                   help="optimiser steps (default 300)")
    s.add_argument("--data", metavar="FILE.pt|MODULE:FUNCTION",
                   help="the training batches (default: the model's synthetic task)")
    s.add_argument("--eval-data", metavar="FILE.pt|MODULE:FUNCTION",
                   help="held-out batches (default: --holdout of --data's, or the task's)")
    s.add_argument("--holdout", metavar="F", type=_number(0.0, 1.0), default=0.1,
                   help="the fraction of a FILE.pt's batches held out (default 0.1)")
    s.add_argument("--batch-size", metavar="N", type=_positive_int, default=32,
                   help="examples per batch of the synthetic task (default 32)")
    s.add_argument("--set", metavar="FIELD=VALUE", action="append", default=[],
                   help="a Config field (repeatable); the model starts from Config.tiny(), "
                   "or Config() with --full")
    s.add_argument("--full", action="store_true", help="the spec's full sizes (Config())")
    s.add_argument("--lr", type=_number(0.0, closed=False), default=3e-3,
                   help="the peak learning rate (default 3e-3)")
    s.add_argument("--weight-decay", type=_number(0.0), default=0.01)
    s.add_argument("--warmup", type=_number(0.0), default=0.05,
                   help="warm-up steps, or a fraction of --steps below 1 (default 0.05)")
    s.add_argument("--clip", type=_number(0.0, closed=False), default=1.0,
                   help="the largest gradient norm (default 1.0)")
    s.add_argument("--eval-every", metavar="N", type=_positive_int, default=None,
                   help="evaluate every N steps (default: ten times a run)")
    s.add_argument("--patience", metavar="N", type=_positive_int, default=None,
                   help="stop after N evaluations without a lower held-out loss")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", metavar="N", type=_positive_int, default=None,
                   help="torch threads (default: TORCH_NUM_THREADS / OMP_NUM_THREADS, "
                   "else the cores the machine's load leaves free)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def cmd_train(args) -> int:
    from .diagnostics import SpecError

    try:
        return _train(args)
    except SpecError as e:
        print(e.render(), file=sys.stderr)
        return EXIT_SPEC
    except (UsageError, ValueError, TypeError, FileNotFoundError) as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"taxcompile: error: {text}", file=sys.stderr)
        return EXIT_USAGE


def _train(args) -> int:
    import torch

    from . import api, fitting, fitting_tasks, threads

    out = Path(args.out)
    if out.is_dir():
        raise UsageError(f"--out {out} is a directory; name the checkpoint file")
    n_threads, why = threads.choose(args.threads)
    mod, cm, source = fitting_tasks.load(args.spec, args.model)
    cfg = api.config(mod, not args.full, **_fields(args.set, mod))
    torch.manual_seed(args.seed)
    model = mod.Model(cfg)
    name = cm.model.name
    if args.data is None:
        if args.eval_data is not None:
            raise UsageError("--eval-data needs --data (the synthetic task has its own)")
        task = fitting_tasks.synthetic(model, mod, cm, source, args.batch_size, args.seed)
        data, eval_data, loss, metric = task.data, task.eval_data, task.loss, task.metric
        what, holdout = f"its synthetic task ({task.describe})", 0.0
    else:
        data = _read(args.data, cfg, "--data")
        eval_data = None if args.eval_data is None else _read(args.eval_data, cfg, "--eval-data")
        _check_inputs(model, name, data, args.data)
        loss = metric = None
        what = args.data
        holdout = args.holdout if eval_data is None and isinstance(data, list) else 0.0
    h = fitting.fit(model, data, steps=args.steps, lr=args.lr, weight_decay=args.weight_decay,
                    warmup=args.warmup, clip=args.clip, eval_data=eval_data, holdout=holdout,
                    eval_every=args.eval_every, patience=args.patience, loss=loss,
                    metric=metric, seed=args.seed, checkpoint=out,
                    progress=False if args.quiet else None, threads=args.threads,
                    meta=dict(spec=str(args.spec), model=name, config=dataclasses.asdict(cfg)),
                    on_resume=lambda step: print(f"taxcompile: resuming from {out} at step "
                                                 f"{step}", file=sys.stderr))
    print(_summary(name, what, h, out, n_threads, why))
    return EXIT_OK


def _summary(name, what, h, out, n_threads, why) -> str:
    why_stopped = {"early stopping": " (stopped early)", "data ran out": " (the data ran out)"}
    text = f"trained `{name}` on {what}: {h.steps} steps{why_stopped.get(h.stopped, '')}"
    if h.losses:
        text += f", loss {h.losses[0]:.4f} -> {h.losses[-1]:.4f}"
    if h.evals:
        ev = h.evals[-1]
        text += f"; held-out loss {ev['loss']:.4f}"
        if "accuracy" in ev:
            text += f", accuracy {ev['accuracy']:.3f}"
    if h.trained:
        text += (f"; {h.steps_per_second:.1f} steps/s, {h.examples / h.seconds:.0f} "
                 f"examples/s on {h.threads} thread{'s' * (h.threads != 1)}"
                 + (f" ({why})" if h.threads == n_threads else " (as the run it resumed)"))
    return text + f"; checkpoint {out}"


def _fields(items: list[str], mod) -> dict:
    fields = {f.name: f for f in dataclasses.fields(mod.Config)}
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--set {item!r}: expected FIELD=VALUE")
        key = key.strip()
        default = getattr(mod.Config(), key, None)
        if key in fields and isinstance(default, (int, float)) and not isinstance(default, bool):
            kind = type(default)
            try:
                out[key] = kind(value)
            except ValueError:
                what = "a whole number" if kind is int else "a number"
                raise UsageError(f"--set {key}: expected {what}, got {value!r}") from None
        else:
            out[key] = value  # api.config names an unknown field
    return out


def _read(source: str, cfg, option: str):
    """The batches of ``FILE.pt`` or ``module:function``; UsageError saying what is wrong."""
    import torch

    if source.endswith(".pt") or Path(source).exists():
        path = Path(source)
        if not path.is_file():
            raise UsageError(f"{option}: no such file: {path}")
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            raise UsageError(f"{option}: {path} is not a file of tensors that torch.load "
                             f"reads with weights_only=True ({type(e).__name__})") from None
        if not isinstance(data, (list, tuple)) or not data:
            raise UsageError(f"{option}: {path} holds a {type(data).__name__}; expected a "
                             "non-empty list of batches (inputs, target)")
        return list(data)
    module, colon, func = source.partition(":")
    if not colon or not module or not func.isidentifier():
        raise UsageError(f"{option} {source!r}: expected FILE.pt or MODULE:FUNCTION")
    sys.path.insert(0, str(Path.cwd()))
    try:
        fn = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as e:
        raise UsageError(f"{option} {source}: {e}") from None
    finally:
        sys.path.pop(0)
    if not callable(fn):
        raise UsageError(f"{option} {source}: not a function")
    return fn(cfg)


def _check_inputs(model, name, data, source) -> None:
    """The first batch of a list names only inputs of the model."""
    if not isinstance(data, list):
        return
    from .fitting_parts import batch_parts

    inputs, _ = batch_parts(data[0], 0, None)
    known = []
    for p in inspect.signature(model.forward).parameters:  # the inputs come first
        if p == "return_attention":
            break
        known.append(p)
    for key in inputs:
        if key not in known:
            raise UsageError(f"{source}: batch 0: `{key}` is not an input of model `{name}` "
                             f"(its inputs: {', '.join(known)})")
