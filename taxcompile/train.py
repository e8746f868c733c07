"""Brief training for the report's heatmaps: each model at toy sizes (``Config.tiny()``)
learns a small synthetic task that its attention has to solve, so that the heatmap shows a
learnt alignment rather than the near-uniform weights of an untrained model.

The task follows the model's inputs and outputs (from the checked IR):

- ``reverse`` / ``copy`` (a decoder over a token source): the target is the source read
  backwards (forwards for a monotonic local alignment), fed back with teacher forcing;
- ``describe`` (a decoder over a grid): three patterns planted in the grid, the target
  names them in reading order;
- ``point`` (a per-position output with one class): the context holds the question's
  word once, the output points at it;
- ``segment`` (an output over a grid's axes): mark the planted square's pixels;
- ``keyword`` (everything else): one of four keywords (a token, or a pattern in a grid or
  feature sequence) is planted at a random position of every input, and every output
  position predicts which one.

Whether a model learned its task is decided on a held-out batch (``HELDOUT`` examples of
their own seed, none a training batch): learned when its loss there is at most half of
chance, the loss of predicting the targets' frequencies without reading the input (ln C
for C equally likely classes; ``Heldout``). The report greys and labels the heatmap of a
model that did not, with its held-out loss against chance.

Deterministic (seeded data and initialisation), CPU-sized, and cached: the trained
weights are stored under ``cache_dir()`` keyed by a hash of the generated source and the
training settings, so a second report reuses them.

Imports torch lazily (only when a report draws heatmaps); the front end never loads it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from . import mechanisms as mech

STEPS = 200  # default training steps per model of the report
BATCH = 16
LR = 3e-3
DONE = 0.05  # training stops early once the loss stays below this for PATIENCE steps
PATIENCE = 10
SEED = 0
KEYWORDS = 4  # classes of the keyword task
ALPHABET = 12  # tokens of the copy / reverse task
BOS = 1
VERSION = 1  # bump when the tasks change: old cache entries are then not reused
HELDOUT = 256  # examples in the held-out batch that decides whether a model learned its task
HELDOUT_SEED = SEED + 2  # apart from the training batches (SEED) and the batch shown (SEED + 1)
CHANCE = 4096  # examples whose targets give chance (their entropy, within about 0.001)
LEARNED = 0.5  # learned: a held-out loss at most this fraction of chance

TASKS = {
    "reverse": "reverse the source sequence",
    "copy": "copy the source sequence",
    "describe": "name the three patterns planted in the grid, in reading order",
    "point": "point at the question's word in the context",
    "segment": "segment the square planted in the image",
    "keyword": "find which of 4 keywords is planted in the input",
    "none": "none: the model has no output to train",
}


@dataclass(frozen=True)
class Heldout:
    """The task's loss on a held-out batch (``HELDOUT`` examples drawn with their own seed,
    none of them a training batch) against chance: the loss of predicting the targets'
    frequencies without reading the input, the entropy of the task's targets (ln C when
    their C classes are equally likely; summed over the outputs of a model with several),
    measured on the targets of ``CHANCE`` examples.
    The model learned its task when its held-out loss is at most ``LEARNED`` (half) of
    chance: it has taken away at least half of the targets' uncertainty (never when chance
    is 0: targets of one class teach nothing)."""
    loss: float
    chance: float
    classes: int  # distinct target classes (of all outputs)
    uniform: bool  # chance is ln(classes): the classes are (about) equally likely

    @property
    def learned(self) -> bool:
        return self.chance > 0 and self.loss <= LEARNED * self.chance

    @property
    def chance_text(self) -> str:
        if self.classes == 1:  # (an output one wide: cross-entropy over one class is 0)
            return "ln 1 = 0.00: its targets have one class, nothing to learn"
        if self.uniform:
            return f"ln {self.classes} = {self.chance:.2f}"
        return f"{self.chance:.2f} (the entropy of its {self.classes} classes)"


@dataclass(frozen=True)
class Trained:
    """A briefly trained model, the task it learnt, a batch of that task to show and its
    loss on a held-out batch against chance (None without a task)."""
    model: object
    inputs: dict
    task: str
    steps: int
    loss: float  # the training loss of the last step
    cached: bool
    heldout: Heldout | None = None

    @property
    def describe(self) -> str:
        return TASKS[self.task]

    @property
    def learned(self) -> bool:
        return self.heldout is not None and self.heldout.learned


def cache_dir() -> Path:
    """``$TAXCOMPILE_CACHE`` or ``$XDG_CACHE_HOME/taxcompile`` (``~/.cache/taxcompile``),
    with the report's trained weights under ``report-training/``."""
    root = os.environ.get("TAXCOMPILE_CACHE")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(xdg) / "taxcompile")
    return Path(root) / "report-training"


def cache_key(source: str, steps: int) -> str:
    settings = dict(steps=steps, batch=BATCH, lr=LR, seed=SEED, done=DONE, patience=PATIENCE, keywords=KEYWORDS,
                    alphabet=ALPHABET, version=VERSION)
    h = hashlib.sha256(source.encode("utf-8"))
    h.update(json.dumps(settings, sort_keys=True).encode("utf-8"))
    return h.hexdigest()[:32]


# --------------------------------------------------------------------------------------
# the task of a model


def _vocab(source: str, name: str, cfg) -> int:
    """The token range of input ``name`` at ``cfg``: what its ``example_inputs`` draws."""
    m = re.search(rf"out\['{re.escape(name)}'\] = torch\.randint\(0, (\d+|cfg\.(\w+)),", source)
    if m is None:
        return 16
    return int(getattr(cfg, m.group(2))) if m.group(2) else int(m.group(1))


@dataclass
class _Input:
    name: str
    kind: str  # tokens, grid, sequence, …
    axes: tuple
    autoregressive: bool
    vocab: int  # tokens only


class Task:
    """Batches of one synthetic task for one generated model."""

    def __init__(self, mod, cm, source: str, cfg, shapes: dict):
        import torch

        self.cfg = cfg
        self._shapes = shapes  # output name -> its shape on the example inputs
        self.example = mod.example_inputs(batch_size=2, cfg=cfg)
        m = cm.model
        self.inputs = [_Input(n.id, n.kind, tuple(n.axes), bool(n.autoregressive),
                              _vocab(source, n.id, cfg))
                       for n in m.nodes if n.kind_ == "input" and n.kind not in ("mask", "graph")]
        # mask and graph inputs: every key kept, a complete graph (dense adjacency)
        self.masks = [(n.id, n.kind, tuple(n.axes)) for n in m.nodes
                      if n.kind_ == "input" and n.kind in ("mask", "graph")]
        for i in self.inputs:  # pointers: positions of the axis they point into
            ptr = m.node(i.name)
            if i.kind == "pointers":
                other = next(n for n in m.inputs if ptr.into in n.axes)
                i.vocab = int(self.example[other.id].shape[1 + other.axes.index(ptr.into)])
        self.outputs = [(n.name, tuple(cm.shapes[n.id].axes)) for n in m.nodes
                        if n.kind_ == "output"]
        self.monotonic = any(mech.align(a.align.fn).holds("step_start", a.align)
                             for a in (n for n in m.nodes if n.kind_ == "attention"))
        self.task = self._choose() if self.outputs else "none"
        g = torch.Generator().manual_seed(1234)
        self.patterns = torch.randn(KEYWORDS, 1 << 12, generator=g)  # cut to each width

    def _choose(self) -> str:
        tokens = [i for i in self.inputs if self._is_tokens(i)]
        ar = [i for i in tokens if i.autoregressive]
        if ar and any(axes == ar[0].axes for _, axes in self.outputs):
            if any(not i.autoregressive and len(i.axes) == 1 for i in tokens):
                return "copy" if self.monotonic else "reverse"
            if any(i.kind == "grid" for i in self.inputs):
                return "describe"
        by_axes = {i.axes: i for i in self.inputs if not i.autoregressive}
        for name, axes in self.outputs:
            i = by_axes.get(axes)
            if i is None or not axes:
                continue
            if len(axes) == 1 and self._is_tokens(i) and self._width(name) == 1:
                return "point"
            if len(axes) == 2 and not self._is_tokens(i):
                return "segment"
        return "keyword"

    def _is_tokens(self, i: _Input) -> bool:
        return not self.example[i.name].dtype.is_floating_point

    # ---- one batch

    def batch(self, g, size: int) -> tuple[dict, dict]:
        """Inputs and, per output name, (target, how): 'ce' over the last axis, or
        'point' over the positions."""
        import torch

        x = {}
        for k, v in self.example.items():  # masks: every position kept
            if k.endswith("_mask") and v.dtype == torch.bool:
                x[k] = torch.ones((size, *v.shape[1:]), dtype=torch.bool)
        label = torch.randint(0, KEYWORDS, (size,), generator=g)
        where: dict[str, torch.Tensor] = {}
        for i in self.inputs:
            shape = (size, *self.example[i.name].shape[1:])
            if i.kind == "pointers":  # positions of the axis they point into
                t = torch.randint(0, i.vocab, shape, generator=g)
            elif self._is_tokens(i):
                lo = KEYWORDS + 2
                hi = max(lo + 2, min(i.vocab, lo + ALPHABET))
                t = torch.randint(lo, hi, shape, generator=g)
            else:
                t = 0.5 * torch.randn(shape, generator=g)
            x[i.name] = t
        for name, kind, axes in self.masks:
            lengths = [next(x[i.name].shape[1 + i.axes.index(a)] for i in self.inputs
                            if a in i.axes) for a in axes]
            if kind == "graph":
                lengths = lengths * 2  # (size, N, N)
            x[name] = torch.ones((size, *lengths), dtype=torch.bool)
        if self.task in ("reverse", "copy"):
            return x, self._seq2seq(x, g)
        if self.task == "describe":
            return x, self._describe(x, g)
        targets = {}
        for i in self.inputs:  # the keyword at one random position of every input
            if i.autoregressive or self.task == "segment" or i.kind == "pointers":
                continue
            where[i.name] = self._plant(x, i, label, g)
        for name, axes in self.outputs:
            targets[name] = self._target(x, name, axes, label, where, g)
        return x, targets

    def _positions(self, x, i: _Input) -> int:
        t = x[i.name]
        return int(t[0].numel() if self._is_tokens(i) else t[0, ..., 0].numel())

    def _plant(self, x, i: _Input, label, g):
        """Put keyword ``label`` at a random position of input ``i``; returns the flat
        positions."""
        import torch

        t = x[i.name]
        B = t.shape[0]
        n = self._positions(x, i)
        pos = torch.randint(0, n, (B,), generator=g)
        rows = torch.arange(B)
        if self._is_tokens(i):
            t.view(B, n)[rows, pos] = 2 + label
        else:
            d = t.shape[-1]
            flat = t.view(B, n, d)
            if d >= 4:
                pat = self.patterns[:, :d] / (self.patterns[:, :d].norm(dim=1, keepdim=True)
                                              / d ** 0.5)
                flat[rows, pos] += 2.0 * pat[label]
            else:
                flat[rows, pos] += (2.0 + 1.5 * label).view(B, 1).to(t.dtype)
        return pos

    def _target(self, x, name, axes, label, where, g):
        by_axes = {i.axes: i for i in self.inputs if not i.autoregressive}
        i = by_axes.get(axes)
        if self.task == "point" and i is not None and self._width(name) == 1:
            # a pointer: the context's keyword is the question's word
            return where[i.name], "point"
        if self.task == "segment" and i is not None and len(axes) == 2:
            return self._segment(x, i, g), "ce"
        size = label.shape[0]
        shape = (size, *self._shapes[name][1:-1])
        n = self._width(name)
        return (label % n).view(size, *([1] * (len(shape) - 1))).expand(shape), "ce"

    def _segment(self, x, i: _Input, g):
        """A bright square (value 3) at a random place; labels: 1 on it, 0 elsewhere."""
        import torch

        t = x[i.name]
        B, H, W = t.shape[:3]
        s = max(1, min(H, W) // 4)
        top = torch.randint(0, H - s + 1, (B,), generator=g)
        left = torch.randint(0, W - s + 1, (B,), generator=g)
        rows = torch.arange(H).view(1, H, 1)
        cols = torch.arange(W).view(1, 1, W)
        inside = ((rows >= top.view(B, 1, 1)) & (rows < (top + s).view(B, 1, 1))
                  & (cols >= left.view(B, 1, 1)) & (cols < (left + s).view(B, 1, 1)))
        t += 3.0 * inside.unsqueeze(-1).to(t.dtype)
        return inside.long()

    def _seq2seq(self, x, g):
        import torch

        src = next(i for i in self.inputs if self._is_tokens(i) and not i.autoregressive
                   and len(i.axes) == 1)
        tgt = next(i for i in self.inputs if i.autoregressive)
        s = x[src.name]
        lo = KEYWORDS + 2
        hi = max(lo + 2, min(src.vocab, tgt.vocab, lo + ALPHABET))
        s.copy_(torch.randint(lo, hi, s.shape, generator=g))
        B, S = s.shape
        T = x[tgt.name].shape[1]
        seq = s if self.task == "copy" else s.flip(1)
        y = torch.full((B, T), -100, dtype=torch.long)
        n = min(S, T)
        y[:, :n] = seq[:, :n]
        x[tgt.name] = torch.cat([torch.full((B, 1), BOS), y[:, :-1].clamp(min=0)], 1)
        return {name: (y, "ce") for name, axes in self.outputs if axes == tgt.axes}

    def _describe(self, x, g):
        import torch

        grid = next(i for i in self.inputs if i.kind == "grid")
        tgt = next(i for i in self.inputs if i.autoregressive)
        t = x[grid.name]
        B = t.shape[0]
        n = self._positions(x, grid)
        k = min(3, n)
        pos = torch.stack([torch.randperm(n, generator=g)[:k] for _ in range(B)]).sort(1).values
        labels = torch.randint(0, KEYWORDS, (B, k), generator=g)
        d = t.shape[-1]
        flat = t.view(B, n, d)
        pat = self.patterns[:, :d] / (self.patterns[:, :d].norm(dim=1, keepdim=True) / d ** 0.5)
        for j in range(k):
            flat[torch.arange(B), pos[:, j]] += 2.0 * pat[labels[:, j]]
        T = x[tgt.name].shape[1]
        y = torch.full((B, T), -100, dtype=torch.long)
        y[:, :k] = 2 + labels
        x[tgt.name] = torch.cat([torch.full((B, 1), BOS), y[:, :-1].clamp(min=0)], 1)
        return {name: (y, "ce") for name, axes in self.outputs if axes == tgt.axes}

    def _width(self, name) -> int:
        return int(self._shapes[name][-1])


def _outputs(out, names: list[str]) -> dict:
    o = getattr(out, "output", None)
    if isinstance(o, dict):
        return dict(o)
    return {names[0]: o} if names and o is not None else {}


def _nll(out, names, targets):
    """The task's loss (cross-entropy, summed over the outputs) and its per-example terms."""
    import torch.nn.functional as F

    got = _outputs(out, names)
    total, per_example = 0.0, 0.0
    for name, (y, how) in targets.items():
        z = got[name].float()
        if how == "point":  # (B, L, 1): a softmax over the positions
            nll = F.cross_entropy(z.flatten(1), y, reduction="none")
        else:
            flat = F.cross_entropy(z.reshape(-1, z.shape[-1]), y.reshape(-1), reduction="none",
                                   ignore_index=-100).view(y.shape)
            keep = (y != -100).float()
            if y.dim() == 1:
                nll = flat
            else:
                nll = (flat * keep).flatten(1).sum(1) / keep.flatten(1).sum(1).clamp(min=1)
        total = total + nll.mean()
        per_example = per_example + nll.detach()
    return total, per_example


def _loss(out, names, targets):
    import torch

    total, per_example = _nll(out, names, targets)
    # hard attention (sampled positions): REINFORCE with the batch-mean baseline
    lp = getattr(out, "log_probs", None)
    if isinstance(lp, dict) and lp and torch.is_tensor(per_example):
        reward = -(per_example - per_example.mean())
        for v in lp.values():
            total = total - (reward * v.reshape(v.shape[0], -1).sum(1)).mean()
    return total


def _entropy(y) -> tuple[float, int, bool]:
    """The entropy of the values of ``y`` (-100: not counted), their number and whether
    they are about equally likely (the entropy within 0.01 of ln of their number)."""
    import math

    import torch

    _, counts = torch.unique(y[y != -100], return_counts=True)
    p = counts.double() / counts.sum()
    h = float(-(p * p.log()).sum())
    return h, len(counts), abs(h - math.log(len(counts))) < 0.01


def heldout(model, task: Task, names: list[str]) -> Heldout:
    """``model``'s loss on the held-out batch of ``task``, in eval mode (``Heldout``)."""
    import torch

    x, targets = task.batch(torch.Generator().manual_seed(HELDOUT_SEED), HELDOUT)
    was = model.training
    model.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss = float(_nll(model(**x), names, targets)[0])
    finally:
        model.train(was)
    _, targets = task.batch(torch.Generator().manual_seed(HELDOUT_SEED + 1), CHANCE)
    parts = [_entropy(y) for y, _ in targets.values()]
    return Heldout(loss, sum(h for h, _, _ in parts), sum(c for _, c, _ in parts),
                   all(u for _, _, u in parts) and len(parts) == 1)


def task_of(model, mod, cm, source: str) -> tuple[Task, list[str]]:
    """The synthetic task of ``model`` (built from ``mod`` at ``model.cfg``) and its output
    names: its outputs' shapes come from a run on the example inputs."""
    import torch

    example = mod.example_inputs(batch_size=2, cfg=model.cfg)
    names = [n.name for n in cm.model.nodes if n.kind_ == "output"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe = model(**example)
    shapes = {k: tuple(v.shape) for k, v in _outputs(probe, names).items()}
    return Task(mod, cm, source, model.cfg, shapes), names


def train(mod, cm, source: str, steps: int = STEPS, cache: Path | None = None) -> Trained:
    """``Model(Config.tiny())`` trained ``steps`` steps on its synthetic task (weights
    from ``cache`` when it holds this source and these settings)."""
    import torch

    cfg = mod.Config.tiny()
    torch.manual_seed(SEED)
    model = mod.Model(cfg)
    task, names = task_of(model, mod, cm, source)
    g_show = torch.Generator().manual_seed(SEED + 1)
    shown, _ = task.batch(g_show, 2)

    if task.task == "none":  # nothing to learn from: the weights as initialised
        return Trained(model.eval(), shown, task.task, 0, float("nan"), False)
    key = cache_key(source, steps)
    path = cache / f"{key}.pt" if cache is not None else None
    if path is not None and path.is_file():
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
            model.load_state_dict(saved["state"])
        except Exception:  # a stale or broken entry: train again and replace it
            saved = None
        if saved is not None:
            return Trained(model.eval(), shown, saved["task"], int(saved["steps"]),
                           float(saved["loss"]), True, heldout(model, task, names))
    g = torch.Generator().manual_seed(SEED)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    model.train()
    loss, done, calm = float("nan"), 0, 0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # toy sizes: one thread is faster, and the same every run
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            while done < steps and calm < PATIENCE:
                x, targets = task.batch(g, BATCH)
                total = _loss(model(**x), names, targets)
                opt.zero_grad(set_to_none=True)
                total.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                loss = float(total.detach())
                done += 1
                calm = calm + 1 if loss < DONE else 0
    finally:
        torch.set_num_threads(threads)
    steps = done
    model.eval()
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            torch.save(dict(state=model.state_dict(), task=task.task, steps=steps, loss=loss),
                       tmp)
            os.replace(tmp, path)
        except OSError:  # no cache where it cannot be written: the report still works
            pass
    return Trained(model, shown, task.task, steps, loss, False, heldout(model, task, names))
