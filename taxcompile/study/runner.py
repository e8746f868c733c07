"""``execute(run)``: one run trained under the protocol and measured.

The model is generated in memory (``codegen.generate`` + ``run.load_module``, nothing
written) and its seeds × learning rates are trained together as one ensemble: the members'
parameters are stacked along a leading axis (``torch.func.stack_module_state``) and one
``torch.func.vmap``'d ``functional_call`` runs them all in each step, so a step costs one
dispatch of every operator for the whole ensemble instead of one per member. A model whose
forward cannot be vmapped (hard alignment samples with ``torch.multinomial``) runs its
members one after the other on the same stacked parameters: the same algorithm, chosen
from the model alone, so a run's metrics never depend on where it ran.

AdamW with per-member learning rates, a linear warm-up and a cosine decay, gradient
norms clipped per member; a member that reaches the threshold on the validation batch
stops (its updates are masked) and the run ends when every member has. Each seed keeps
the learning rate that did best on the validation batch (zoology's best of the grid) and
is measured on its own test batch, which decides nothing: its accuracy at each
evaluation is the seed's learning curve."""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field, replace

from . import tasks as T
from .protocol import STREAMS, THRESHOLD, Profile, profile, task_seed
from .runs import Run, SeedResult, StudyError


@dataclass
class Built:
    """A run's generated module, its model and what its forward takes."""
    mod: object
    cm: object
    cfg: object
    inputs: tuple[str, ...]  # the task's tensors the model reads (x, q, z, gold)
    gold_rows: bool  # gold has query rows (alignment[T, L]); else alignment[L]
    row: dict
    # task tensor -> the model's input that reads it (``Run.inputs``; else the same name)
    feed: dict = field(default_factory=dict)

    def arg(self, tensor: str) -> str:
        """The forward() argument that takes the task's ``tensor``."""
        return self.feed.get(tensor, tensor)


def build(run: Run) -> Built:
    from .. import codegen, pipeline
    from ..classification import DIMENSIONS, classify_model
    from ..diagnostics import SpecError
    from ..run import load_module

    try:
        cs = pipeline.load_text(run.spec, run.source)
    except SpecError as e:
        raise StudyError(f"{run.source}: the spec does not check: {str(e).splitlines()[0]}",
                         "run `taxcompile check` on it") from None
    cm = next((m for m in cs.models if m.model.name == run.model), None)
    if cm is None:
        raise StudyError(f"{run.source}: no model `{run.model}`")
    src = codegen.generate(cs, cm, run.source)
    mod = load_module(src, "taxcompile_study_" + run.model_hash()[:16])
    if hasattr(mod, "QueryBlocks"):
        # the additive score's blocked form saves memory at large sizes and is an autograd
        # Function, which vmap cannot batch; its plain form (what torch.compile runs) is the
        # same arithmetic, and the study's sizes are small
        mod.QueryBlocks.apply = staticmethod(lambda fn, keep, q, *xs: fn(keep, q, *xs))
    names = {n.id: n for n in cm.model.nodes if n.kind_ == "input"}
    gold = names.get("gold")
    c = classify_model(cm)
    row = {d: c.cells[d].text(d) for d in DIMENSIONS}
    feed = dict(run.inputs)
    reads = tuple(n for n in ("x", "q", "z", "gold") if feed.get(n, n) in names)
    return Built(mod, cm, mod.Config(**dict(run.config)), reads,
                 gold is not None and len(gold.axes) == 2, row, feed)


def _kwargs(b: Built, batch: dict, train: bool) -> dict:
    kw = {b.arg(n): batch[n] for n in b.inputs if n != "gold"}
    if "gold" in b.inputs and train:
        kw["gold"] = batch["gold"] if b.gold_rows else batch["gold"][:, 0]
    return kw


def per_query(o, T_: int, lead: int = 1):
    """Logits ``o`` (lead axes…, [Q,] V) as (lead axes…, T, V): one prediction per example
    is one query row; a capsule model's per-class outputs (C, V) are averaged into one."""
    if o.dim() == lead + 1:
        return o.unsqueeze(lead)
    if o.shape[lead] != T_ and T_ == 1:
        return o.mean(lead, keepdim=True)
    return o


def logits_of(out, T_: int):
    """A model's Output as logits (B, T, V)."""
    return per_query(out.output, T_)


_task_seed = task_seed  # benchmarks/study.py's name


# ---- the ensemble -----------------------------------------------------------------------


class Ensemble:
    """M members (seed, lr) of one generated model with stacked parameters."""

    def __init__(self, b: Built, run: Run, prof: Profile):
        import torch
        from torch.func import stack_module_state

        self.b, self.run, self.prof = b, run, prof
        self.members = [(s, lr) for s in run.seeds for lr in run.lrs]
        models = []
        for s, _ in self.members:
            torch.manual_seed(s)
            models.append(b.mod.Model(b.cfg))
        self.base = models[0]
        self.n_params = sum(p.numel() for p in self.base.parameters())
        params, self.buffers = stack_module_state(models)
        self.params = {k: v.detach().clone().requires_grad_() for k, v in params.items()}
        self.m = {k: torch.zeros_like(v) for k, v in self.params.items()}
        self.v = {k: torch.zeros_like(v) for k, v in self.params.items()}
        self.lr = torch.tensor([lr for _, lr in self.members])
        self.active = torch.ones(len(self.members), dtype=torch.bool)
        self.vmap = True

    def _one(self, params, buffers, kw):
        import torch
        from torch.func import functional_call

        out = functional_call(self.base, (params, buffers), (), dict(kw, validate=False))
        lp = getattr(out, "log_probs", None) or {}
        pen = getattr(out, "penalty", 0.0)
        pen = pen if torch.is_tensor(pen) else torch.zeros(())
        return out.output, pen, tuple(v.reshape(v.shape[0], -1).sum(1) for v in lp.values())

    def forward(self, kws: dict):
        """Per member: output (M, B, …), penalty (M,), log-probs [(M, B)]."""
        import torch

        if self.vmap:
            from torch.func import vmap
            try:
                return vmap(self._one, randomness="different")(self.params, self.buffers, kws)
            except Exception:  # an operator vmap cannot batch: members one by one
                self.vmap = False
        outs = [self._one({k: v[i] for k, v in self.params.items()},
                          {k: v[i] for k, v in self.buffers.items()},
                          {k: v[i] for k, v in kws.items()}) for i in range(len(self.members))]
        return (torch.stack([o[0] for o in outs]), torch.stack([o[1] for o in outs]),
                tuple(torch.stack([o[2][j] for o in outs]) for j in range(len(outs[0][2]))))

    def step(self, kws: dict, y, t: int) -> "torch.Tensor":
        """One AdamW step of every active member; returns the members' losses (M,)."""
        import torch
        import torch.nn.functional as F

        out, pen, lps = self.forward(kws)
        M, B = y.shape[:2]
        z = per_query(out, y.shape[2], lead=2)  # (M, B, T, V)
        nll = F.cross_entropy(z.reshape(-1, z.shape[-1]).float(), y.reshape(-1),
                              ignore_index=-100, reduction="none").view(M, B, -1)
        keep = (y != -100).float()
        per_ex = (nll * keep).sum(2) / keep.sum(2).clamp_min(1)  # (M, B)
        loss = per_ex.mean(1) + pen  # (M,)
        total = loss
        for lp in lps:  # hard / reinforced alignment: REINFORCE, batch-mean baseline
            reward = -(per_ex - per_ex.mean(1, keepdim=True)).detach()
            total = total - (reward * lp).mean(1)
        grads = torch.autograd.grad(total.sum(), list(self.params.values()), allow_unused=True)
        self._adamw(grads, t)
        return loss.detach()

    @property
    def schedule(self):
        p = self.prof
        return lambda t: (t + 1) / p.warmup if t < p.warmup else \
            0.5 * (1 + math.cos(math.pi * (t - p.warmup) / max(1, p.steps - p.warmup)))

    def _adamw(self, grads, t: int) -> None:
        import torch

        b1, b2, eps, wd = 0.9, 0.999, 1e-8, self.prof.weight_decay
        M = len(self.members)
        grads = [torch.zeros_like(p) if g is None else g
                 for g, p in zip(grads, self.params.values())]
        norm = torch.sqrt(sum(g.reshape(M, -1).pow(2).sum(1) for g in grads))  # (M,)
        scale = (self.prof.clip / (norm + 1e-6)).clamp(max=1.0)
        lr = self.lr * self.schedule(t) * self.active  # (M,): stopped members stay put
        with torch.no_grad():
            for (k, p), g in zip(self.params.items(), grads):
                shape = (M,) + (1,) * (p.dim() - 1)
                g = g * scale.view(shape)
                m, v = self.m[k], self.v[k]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                mh = m / (1 - b1 ** (t + 1))
                vh = v / (1 - b2 ** (t + 1))
                lrv = lr.view(shape)
                if p.dim() > 1 or self.prof.decay_scalars:  # (M,): a scalar per member
                    p.mul_(1 - lrv * wd)
                p.sub_(lrv * mh / (vh.sqrt() + eps))

    def member(self, i: int):
        """Member i as a plain model (its own parameters), in eval mode."""
        import torch

        model = self.b.mod.Model(self.b.cfg)
        with torch.no_grad():  # by name, as stacked (a shared parameter is stacked once)
            for k, p in model.named_parameters():
                p.copy_(self.params[k][i])
            for k, buf in model.named_buffers():
                buf.copy_(self.buffers[k][i])
        return model.eval()


def _stack(batches: list[dict]) -> dict:
    import torch

    return {k: torch.stack([b[k] for b in batches]) for k in batches[0]}


def execute(run: Run) -> list[SeedResult]:
    """Train ``run`` and measure each seed at its best learning rate."""
    import torch

    if run.task not in T.TASKS:
        raise StudyError(f"unknown task `{run.task}`", f"one of {', '.join(T.TASKS)}")
    prof = profile(run.profile)
    if run.budget is not None:  # --steps: the schedule is laid over this budget
        prof = replace(prof, steps=run.budget)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is faster, and the same everywhere
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return execute_with(run, prof)
    finally:
        torch.set_num_threads(threads)


def _batches(run: Run, prof: Profile, stream: str, size: int) -> dict:
    """One batch per seed from the seed's ``stream`` (protocol.STREAMS)."""
    import torch

    return {s: T.batch(run.task, torch.Generator().manual_seed(
        task_seed(run.task, s, STREAMS[stream])), size) for s in run.seeds}


def execute_with(run: Run, prof: Profile) -> list[SeedResult]:
    """``execute`` under the settings ``prof`` (the benchmarks' shortened profiles)."""
    import torch

    from . import evaluate

    start = time.perf_counter()
    b = build(run)
    torch.manual_seed(task_seed(run.task, run.seeds[0], STREAMS["sampling"]))  # hard attention
    ens = Ensemble(b, run, prof)
    M = len(ens.members)
    gens = {s: torch.Generator().manual_seed(task_seed(run.task, s, STREAMS["train"]))
            for s in run.seeds}
    vals = _batches(run, prof, "validation", prof.eval_batch)
    tests = _batches(run, prof, "test", prof.test_batch)
    val = _stack([vals[s] for s, _ in ens.members])
    test = _stack([tests[s] for s, _ in ens.members])
    reached: list[int | None] = [None] * M
    steps = [prof.steps] * M
    acc = torch.zeros(M)
    curves: list[list[tuple[int, float]]] = [[] for _ in range(M)]
    losses = torch.full((M,), float("nan"))
    t = 0

    def evaluate_all():
        was = ens.active.clone()  # a member stopped earlier keeps its last point
        got = evaluate.ensemble_accuracy(ens, val)
        on_test = evaluate.ensemble_accuracy(ens, test)
        for i in range(M):
            if was[i]:
                curves[i].append((t, float(on_test[i])))
        return got

    while t < prof.steps and bool(ens.active.any()):
        data = {s: T.batch(run.task, gens[s], prof.batch) for s in run.seeds}
        batch = _stack([data[s] for s, _ in ens.members])
        # y_train: a task that trains on other targets than it scores (mad-lab's recall)
        losses = ens.step(_kwargs(b, batch, True), batch.get("y_train", batch["y"]), t)
        t += 1
        if t % prof.eval_every == 0 or t == prof.steps:
            acc = evaluate_all()
            for i in range(M):
                if ens.active[i] and acc[i] >= THRESHOLD:
                    reached[i], steps[i] = t, t
                    ens.active[i] = False
    wall = time.perf_counter() - start
    total_steps = max(1, t)
    out = []
    for s in run.seeds:
        idx = [i for i, (si, _) in enumerate(ens.members) if si == s]
        # the learning rate the validation batch chose; the test batch only reports
        best = max(idx, key=lambda i: (float(acc[i]), -float(losses[i]), -i))
        model = ens.member(best)
        att = evaluate.attention_measures(b, model, tests[s], prof.erasure_bins,
                                          task_seed(run.task, s, STREAMS["erasure"]))
        out.append(SeedResult(
            seed=s, lr=float(ens.members[best][1]), params=ens.n_params, steps=steps[best],
            steps_to_threshold=reached[best], seconds=wall / len(run.seeds),
            seconds_per_step=wall / total_steps / M, accuracy=curves[best][-1][1],
            final_loss=float(losses[best]), row=dict(b.row), attention=att,
            val_accuracy=float(acc[best]), curve=curves[best], budget=prof.steps,
            width=run.width))
    return out
