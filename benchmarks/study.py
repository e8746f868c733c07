"""The study's throughput rows (issue 26, item 6).

- ``study_throughput``: study runs per core-hour. One run (the copy task's base model, 3
  seeds x 2 learning rates, the slice profile's sizes) executed as the study does: a
  worker process that executes runs one after another (``REPEAT`` of them here, as a pool
  worker does), each training its six members as one vmapped ensemble; against a plain
  loop that trains each member in a process of its own (``torch.optim.AdamW``, the same
  schedule, batches, clipping and evaluation) and measures each seed's model once, as
  the study does. Both sides are timed in CPU seconds of their processes (one torch
  thread each: core-seconds), which a busy machine disturbs far less than wall time.
  Target: >= 3x the runs per core-hour.
- ``study_ensemble_vs_loop``: the same six members in one process, the ensemble against
  a plain loop over them (no process start-up on either side): what vmap alone buys.
- ``study_step_vs_handwritten``: one training step (forward, loss, backward, AdamW) of the
  generated base model against a hand-written ``nn.Module`` of the same combination
  (additive score, global alignment, one head) with the same weights; outputs checked
  equal first. Target: <= 1.05x.
- ``study_step_compiled``: the generated step under ``torch.compile`` against eager (the
  compile time reported beside it).
"""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import time
from dataclasses import replace

import torch
from torch import nn

from .cases import ROOT, Settings, row, skipped


def _run_and_profile(quick: bool):
    from taxcompile.study import models as Mdl
    from taxcompile.study.protocol import PROFILES
    from taxcompile.study.runs import Run

    prof = PROFILES["slice"]
    prof = replace(prof, steps=30 if quick else 150, eval_every=10 if quick else 50,
                   d=32, seeds=(0, 1, 2), lrs=(3e-3, 1e-2))
    m = replace(Mdl.slice_models("copy", prof.d)[0], d=prof.d)
    run = Run(m.source, Mdl.spec_text(m), m.name, "copy", prof.seeds, prof.lrs, prof.name)
    return run, prof


REPEAT = 3  # runs executed by the candidate's worker process


def plain_member(run, prof, seed: int, lr: float, measure: bool = False) -> float:
    """Train one member the plain way (and, with ``measure``, evaluate its attention as
    the study does); returns its final evaluation accuracy."""
    import torch.nn.functional as F

    from taxcompile.study import tasks as T
    from taxcompile.study.protocol import THRESHOLD
    from taxcompile.study.runner import _kwargs, _task_seed, build, logits_of

    b = build(run)
    torch.manual_seed(seed)
    model = b.mod.Model(b.cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=prof.weight_decay)

    def sched(t):
        return (t + 1) / prof.warmup if t < prof.warmup else \
            0.5 * (1 + math.cos(math.pi * (t - prof.warmup) / max(1, prof.steps - prof.warmup)))
    lrs = torch.optim.lr_scheduler.LambdaLR(opt, sched)
    g = torch.Generator().manual_seed(_task_seed(run.task, seed, 1))
    ev = T.batch(run.task, torch.Generator().manual_seed(_task_seed(run.task, seed, 2)),
                 prof.eval_batch)
    acc = 0.0
    for t in range(prof.steps):
        batch = T.batch(run.task, g, prof.batch)
        out = model(**_kwargs(b, batch, True), validate=False)
        z = logits_of(out, batch["y"].shape[1])
        loss = F.cross_entropy(z.reshape(-1, z.shape[-1]), batch["y"].reshape(-1),
                               ignore_index=-100) + getattr(out, "penalty", 0.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), prof.clip)
        opt.step()
        lrs.step()
        if (t + 1) % prof.eval_every == 0:
            with torch.no_grad():
                z = logits_of(model(**_kwargs(b, ev, False), validate=False), ev["y"].shape[1])
                acc = float((z.argmax(-1) == ev["y"]).float().mean())
            if acc >= THRESHOLD:
                break
    if measure:
        from taxcompile.study.evaluate import attention_measures
        attention_measures(b, model.eval(), ev, prof.erasure_bins, _task_seed(run.task, seed, 4))
    return acc


def _child(args: str) -> None:
    """A worker process of the throughput row: the ensemble (member None) or one member."""
    a = json.loads(args)
    torch.set_num_threads(1)
    run, prof = _run_and_profile(a["quick"])
    if a["member"] is None:
        from taxcompile.study.runner import execute_with
        for _ in range(REPEAT):
            execute_with(run, prof)
    else:
        seed, lr = a["member"]
        plain_member(run, prof, seed, lr, measure=lr == prof.lrs[0])


def _process(quick: bool, member) -> float:
    """CPU seconds (user + system) of one worker process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code = "import sys, benchmarks.study as m; m._child(sys.argv[1])"
    subprocess.run([sys.executable, "-c", code, json.dumps(dict(quick=quick, member=member))],
                   cwd=ROOT, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def study_throughput(s: Settings) -> list[dict]:
    if s.device.type != "cpu":
        return [skipped("study_throughput", "study ensemble", "one model per process",
                        ">= 3x", "the study trains on the CPU")]
    run, prof = _run_and_profile(s.quick)
    members = [(sd, lr) for sd in prof.seeds for lr in prof.lrs]
    c = _process(s.quick, None) / REPEAT
    b = sum(_process(s.quick, m) for m in members)
    speedup = b / c
    return [row("study_throughput",
                f"CPU s per run: a worker executing {REPEAT} runs, {len(members)} members "
                "vmapped each",
                f"CPU s per run: {len(members)} processes, one plain AdamW loop each",
                c, b, c / b, ">= 3x runs per core-hour", speedup >= 3.0,
                runs_per_core_hour=3600 / c, baseline_runs_per_core_hour=3600 / b,
                speedup=speedup, steps=prof.steps)]


def study_ensemble_vs_loop(s: Settings) -> list[dict]:
    if s.device.type != "cpu":
        return [skipped("study_ensemble_vs_loop", "ensemble", "loop", "(report)", "CPU only")]
    from taxcompile.study.runner import execute_with

    run, prof = _run_and_profile(s.quick)
    members = [(sd, lr) for sd in prof.seeds for lr in prof.lrs]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        execute_with(run, prof)  # warm: the first vmap of a process pays its set-up
        start = time.process_time()
        execute_with(run, prof)
        c = time.process_time() - start
        start = time.process_time()
        for sd, lr in members:
            plain_member(run, prof, sd, lr, measure=lr == prof.lrs[0])
        b = time.process_time() - start
    finally:
        torch.set_num_threads(threads)
    return [row("study_ensemble_vs_loop", f"CPU s: {len(members)} members vmapped",
                f"CPU s: a plain loop over the {len(members)} members, same process", c, b,
                c / b, "(report)", None, speedup=b / c)]


# ---- the generated step against a hand-written module ------------------------------------

class HandAdditive(nn.Module):
    """The study's base model written by hand: e = E x; h = e + P + relu(conv3(e));
    u = E q; a = softmax(w^T tanh(W1 u + W2 h + b)) (eq. 6, 25); c = a h; logits = W_o c."""

    def __init__(self, V: int, L: int, d: int):
        super().__init__()
        self.embed = nn.Embedding(V, d)
        self.pos = nn.Parameter(torch.zeros(L, d))
        self.conv = nn.Conv1d(d, d, 3, padding=1)
        self.W1 = nn.Linear(d, d, bias=False)
        self.W2 = nn.Linear(d, d)  # its bias is the score's b
        self.w = nn.Linear(d, 1, bias=False)
        self.out = nn.Linear(d, V)

    def forward(self, x, q):
        e = self.embed(x)  # (B, L, d)
        h = e + self.pos + torch.relu(self.conv(e.transpose(1, 2)).transpose(1, 2))
        u = self.embed(q)  # (B, T, d)
        s = self.w(torch.tanh(self.W1(u).unsqueeze(2) + self.W2(h).unsqueeze(1))).squeeze(-1)
        return self.out(s.softmax(-1) @ h)  # (B, T, V)


def _step_pair(B: int = 64, d: int = 32):
    from taxcompile.study import tasks as T
    from taxcompile.study.runner import build

    run, _ = _run_and_profile(True)
    run = replace(run, spec=run.spec.replace("let d = 32", f"let d = {d}"))
    b = build(run)
    torch.manual_seed(0)
    gen = b.mod.Model(b.cfg)
    info = T.TASKS["copy"]
    hand = HandAdditive(T.V, info.L, d)
    sd = gen.state_dict()
    with torch.no_grad():
        hand.embed.weight.copy_(sd["e_embed.weight"])
        hand.pos.copy_(sd["h_pos.weight"])
        hand.conv.weight.copy_(sd["h_conv.weight"])
        hand.conv.bias.copy_(sd["h_conv.bias"])
        hand.W1.weight.copy_(sd["att.W1"][0].T)
        hand.W2.weight.copy_(sd["att.W2"][0].T)
        hand.W2.bias.copy_(sd["att.b"][0])
        hand.w.weight.copy_(sd["att.w"])
        hand.out.weight.copy_(sd["out_head.weight"])
        hand.out.bias.copy_(sd["out_head.bias"])
    batch = T.batch("copy", torch.Generator().manual_seed(0), B)
    return gen, hand, batch


def _stepper(model, call, y):
    import torch.nn.functional as F

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        z = call()
        loss = F.cross_entropy(z.reshape(-1, z.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def study_step_vs_handwritten(s: Settings) -> list[dict]:
    if s.device.type != "cpu":
        return [skipped("study_step_vs_handwritten", "generated", "hand-written", "<= 1.05",
                        "the study trains on the CPU")]
    gen, hand, batch = _step_pair()
    x, q, y = batch["x"], batch["q"], batch["y"]
    with torch.no_grad():
        diff = float((gen(x=x, q=q, validate=False).output - hand(x, q)).abs().max())
    if diff > 1e-4:
        return [row("study_step_vs_handwritten", "generated", "hand-written", None, None, None,
                    "<= 1.05", False, equivalence=f"**differ**: {diff:.1e}",
                    skipped="the equivalence check failed")]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the study trains
    try:
        c, b = s.alternate(_stepper(gen, lambda: gen(x=x, q=q, validate=False).output, y),
                           _stepper(hand, lambda: hand(x, q), y), repeats=max(s.repeats, 20))
    finally:
        torch.set_num_threads(threads)
    return [row("study_step_vs_handwritten",
                "generated base model (additive, global), train step, validate=False",
                "hand-written nn.Module, same weights", c, b, c / b, "<= 1.05", c / b <= 1.05,
                equivalence=f"outputs agree: max abs diff {diff:.1e}")]


def study_step_compiled(s: Settings) -> list[dict]:
    name = "study_step_compiled"
    if s.quick or s.device.type != "cpu":
        return [skipped(name, "torch.compile", "eager", "(report)",
                        "compiling takes minutes on 2 cores: a full `make bench` only")]
    gen, _, batch = _step_pair()
    x, q, y = batch["x"], batch["q"], batch["y"]
    compiled = torch.compile(gen)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.perf_counter()
        step_c = _stepper(gen, lambda: compiled(x=x, q=q, validate=False).output, y)
        step_c()
        compile_s = time.perf_counter() - start
        c, b = s.alternate(step_c, _stepper(gen, lambda: gen(x=x, q=q, validate=False).output, y),
                           repeats=max(s.repeats, 20))
    finally:
        torch.set_num_threads(threads)
    return [row(name, "generated step, torch.compile", "generated step, eager", c, b, c / b,
                "(report)", None, compile_s=compile_s,
                steps_to_repay=compile_s / max(b - c, 1e-9) if b > c else None)]


CASES = [study_throughput, study_ensemble_vs_loop, study_step_vs_handwritten, study_step_compiled]
