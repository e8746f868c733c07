"""The benchmark cases. Each compiles its spec in ``benchmarks/specs/`` with the current
generator, checks that candidate and baseline compute the same function where they can,
then times them (see ``harness``). Every case returns a list of result rows.

More cases live in other modules of this package, each with a ``CASES`` list of its own,
named in ``CASE_MODULES`` (a module that is not there is left out): ``peers`` (the
libraries a user would pick instead, issue 16)."""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from taxcompile import codegen, pipeline, run

from .harness import alternate, median_time, peak_bytes

ROOT = Path(__file__).resolve().parent.parent
SPECS = Path(__file__).resolve().parent / "specs"


@dataclass
class Settings:
    repeats: int  # timed runs per side
    local_lengths: tuple[int, ...]  # L for the local-attention scaling plot
    device: torch.device = torch.device("cpu")
    dtype: torch.dtype = torch.float32
    quick: bool = False

    def randn(self, *shape, requires_grad: bool = False) -> torch.Tensor:
        x = torch.randn(*shape).to(self.device, self.dtype)
        return x.requires_grad_(requires_grad)

    def put(self, module: nn.Module) -> nn.Module:
        return module.to(self.device, self.dtype)

    @property
    def tol(self) -> float:
        """Equivalence tolerance: 1e-4 in fp32; bf16 keeps 8 bits of mantissa."""
        return 1e-4 if self.dtype == torch.float32 else 5e-2

    def alternate(self, candidate, baseline, repeats: int | None = None):
        return alternate(candidate, baseline, repeats or self.repeats, device=self.device)

    def peak(self, fn) -> int:
        return peak_bytes(fn, self.device)


CPU = Settings(repeats=3, local_lengths=(256, 512))  # the defaults of a case called alone


def build(spec: str, model: str):
    """The generated module of one model of a benchmark spec."""
    cs = pipeline.load(SPECS / spec)
    cm = next(m for m in cs.models if m.model.name == model)
    return run.load_module(codegen.generate(cs, cm, f"benchmarks/specs/{spec}"), f"bench_{model}")


def row(case, candidate, baseline, c_s, b_s, ratio, target, met, c_peak=None, b_peak=None, **extra):
    return {"case": case, "candidate": candidate, "baseline": baseline, "candidate_s": c_s,
            "baseline_s": b_s, "ratio": ratio, "candidate_peak_bytes": c_peak,
            "baseline_peak_bytes": b_peak, "target": target, "met": met, **extra}


def skipped(case, candidate, baseline, target, reason: str) -> dict:
    """A row that could not run (a peer not installed, no such construct yet): never an error."""
    return row(case, candidate, baseline, None, None, None, target, None, skipped=reason)


def train_step(model, call, grad, params):
    """One forward + backward with a fixed output gradient (a realistic dense one: the
    gradient of .sum() is a stride-0 tensor that sends matmuls down a slow path)."""
    def step():
        for p in params:
            p.grad = None
        call().backward(grad)
    return step


# ---- multi-head self-attention vs torch.nn.MultiheadAttention ------------------------------

def _mha(s: Settings, B=8, L=512, d=512, h=8):
    mod = build("mha.attn", "mha")
    torch.manual_seed(0)
    cand = mod.Model(mod.Config(d_model=d, heads=h))
    base = nn.MultiheadAttention(d, h, batch_first=True)
    with torch.no_grad():  # the same weights (MHA's in-projection bias starts at 0)
        cand.self_qkv_proj.weight.copy_(base.in_proj_weight)
        cand.self_attn.out.weight.copy_(base.out_proj.weight)
        cand.self_attn.out.bias.copy_(base.out_proj.bias)
    cand, base = s.put(cand), s.put(base)
    x = s.randn(B, L, d)
    with torch.no_grad():
        ref = base(x, x, x, need_weights=False)[0]
        assert torch.allclose(cand(x=x).output, ref, atol=s.tol), "candidate and baseline differ"
    return cand, base, x


def mha_train(s: Settings) -> list[dict]:
    cand, base, x = _mha(s)
    x.requires_grad_(True)
    g = torch.randn_like(x)
    cand_step = train_step(cand, lambda: cand(x=x).output, g, [x, *cand.parameters()])
    base_noweights = train_step(base, lambda: base(x, x, x, need_weights=False)[0], g,
                                [x, *base.parameters()])
    base_default = train_step(base, lambda: base(x, x, x)[0], g, [x, *base.parameters()])
    c, b = s.alternate(cand_step, base_noweights)
    c2, b2 = s.alternate(cand_step, base_default)
    return [
        row("mha_train", "generated block, forward + backward",
            "nn.MultiheadAttention(x, x, x, need_weights=False)", c, b, c / b, "<= 0.85",
            c / b <= 0.85, s.peak(cand_step), s.peak(base_noweights),
            equivalence=f"outputs agree (tol {s.tol:g}); MHA's in-projection bias is 0"),
        row("mha_train_default", "generated block, forward + backward",
            "nn.MultiheadAttention(x, x, x), its defaults (weights averaged and returned)",
            c2, b2, c2 / b2, "(report)", None, s.peak(cand_step), s.peak(base_default)),
    ]


def mha_infer(s: Settings) -> list[dict]:
    cand, base, x = _mha(s)
    cand.eval()
    base.eval()

    def c_fn():
        with torch.no_grad():
            return cand(x=x).output

    def b_fn():
        with torch.no_grad():  # eval + no_grad + need_weights=False: MHA's native fast path
            return base(x, x, x, need_weights=False)[0]

    c, b = s.alternate(c_fn, b_fn)
    return [row("mha_infer", "generated block, eval, no_grad",
                "nn.MultiheadAttention fast path (eval, no_grad, need_weights=False)",
                c, b, c / b, "<= 0.9", c / b <= 0.9, s.peak(c_fn), s.peak(b_fn),
                equivalence=f"outputs agree (tol {s.tol:g})")]


# ---- the dot-product core vs a dense matmul ----------------------------------------------------

def dot_vs_gemm(s: Settings) -> list[dict]:
    B, H, L, D = 4, 8, 1024, 64
    mod = build("dot.attn", "dot")
    model = s.put(mod.Model(mod.Config(d=D)).eval())
    q, k, v = (s.randn(B * H, L, D) for _ in range(3))  # B x H independent heads

    def c_fn():
        with torch.no_grad():
            return model(q=q, k=k, v=v).output

    with torch.no_grad():
        ref = ((q @ k.transpose(1, 2)) / math.sqrt(D)).softmax(-1) @ v
        assert torch.allclose(c_fn(), ref, atol=s.tol), "the core is wrong"
    n = 2048
    a, b_ = s.randn(n, n), s.randn(n, n)
    c, b = s.alternate(c_fn, lambda: a @ b_)
    core_gflops = 4 * B * H * L * L * D / c / 1e9  # Q K^T and A V: 2 L^2 D multiply-adds each
    mm_gflops = 2 * n ** 3 / b / 1e9
    ratio = core_gflops / mm_gflops
    return [row("dot_vs_gemm", f"generated scaled dot-product core, B={B} H={H} L={L} D={D}",
                f"dense {n}x{n} matmul", c, b, ratio, ">= 0.9 (GFLOP/s ratio)", ratio >= 0.9,
                s.peak(c_fn), None, candidate_gflops=core_gflops, baseline_gflops=mm_gflops,
                equivalence=f"core = softmax(QK^T/sqrt(d))V (tol {s.tol:g})")]


# ---- additive attention vs the broadcast formulation -------------------------------------------

class NaiveAdditive(nn.Module):
    """Additive attention the way Keras' AdditiveAttention and AllenNLP's AdditiveAttention
    compute it: broadcast W1 q + W2 k to (B, Lq, Lk, d_w), then tanh, then w^T."""

    def __init__(self, d: int, d_w: int):
        super().__init__()
        self.W1 = nn.Linear(d, d_w, bias=False)
        self.W2 = nn.Linear(d, d_w)
        self.w = nn.Linear(d_w, 1, bias=False)

    def forward(self, q, k):
        h = torch.tanh(self.W1(q).unsqueeze(2) + self.W2(k).unsqueeze(1))  # (B, Lq, Lk, d_w)
        a = self.w(h).squeeze(-1).softmax(-1)  # (B, Lq, Lk)
        return a @ k


def additive_pair(s: Settings, B=32, Lq=64, Lk=256, d=256, d_w=256):
    """The generated additive module and the broadcast one with the same weights."""
    mod = build("additive.attn", "additive")
    torch.manual_seed(0)
    cand = mod.Model(mod.Config(d=d, d_w=d_w))
    base = NaiveAdditive(d, d_w)
    with torch.no_grad():
        nn.init.normal_(cand.att.b, std=0.1)
        base.W1.weight.copy_(cand.att.W1[0].T)
        base.W2.weight.copy_(cand.att.W2[0].T)
        base.W2.bias.copy_(cand.att.b[0])
        base.w.weight.copy_(cand.att.w)
    return s.put(cand), s.put(base), s.randn(B, Lq, d, requires_grad=True), \
        s.randn(B, Lk, d, requires_grad=True)


def additive(s: Settings) -> list[dict]:
    cand, base, q, k = additive_pair(s)
    B, Lq, d = q.shape
    Lk, d_w = k.shape[1], base.w.weight.shape[1]
    with torch.no_grad():
        assert torch.allclose(cand(q=q, k=k).output, base(q, k), atol=s.tol), \
            "candidate and baseline differ"
    g = torch.randn_like(q)
    c_fn = train_step(cand, lambda: cand(q=q, k=k).output, g, [q, k, *cand.parameters()])
    b_fn = train_step(base, lambda: base(q, k), g, [q, k, *base.parameters()])
    c, b = s.alternate(c_fn, b_fn)
    cp, bp = s.peak(c_fn), s.peak(b_fn)
    return [row("additive", f"generated additive attention, B={B} Lq={Lq} Lk={Lk} d={d} d_w={d_w}, "
                "forward + backward", "broadcast (B, Lq, Lk, d_w) formulation (Keras, AllenNLP)",
                c, b, c / b, "time <= 0.6, peak memory <= 0.1", c / b <= 0.6 and cp / bp <= 0.1,
                cp, bp, peak_ratio=cp / bp, equivalence=f"outputs agree (tol {s.tol:g})")]


# ---- local attention: linear scaling, and against global attention ------------------------------

def _local_step(s: Settings, mod, L: int, B: int = 2, d: int = 64):
    torch.manual_seed(0)
    model = s.put(mod.Model(mod.Config(d=d)))
    x = s.randn(B, L, d, requires_grad=True)
    return train_step(model, lambda: model(x=x).output, s.randn(B, L, d), [x])


def local(s: Settings) -> list[dict]:
    """Local (D = 64) against global self-attention from L = 1,024 to 8,192, and the
    local-attention package on the same band when it is installed (the scaling plot)."""
    from . import peers  # the package's side of the curve

    loc, full = build("local.attn", "local"), build("local.attn", "full")
    # the banded path agrees with the explicit one (which the weights-returning call takes)
    m = s.put(loc.Model(loc.Config(d=64)))
    x = s.randn(1, 300, 64)
    with torch.no_grad():
        assert torch.allclose(m(x=x).output, m(x=x, return_attention=True).output, atol=s.tol)
    peer = peers.local_single_head_peer(s)  # None when local-attention is not installed
    times, curve = {}, {}
    for L in s.local_lengths:
        sides = {"local": _local_step(s, loc, L), "global": _local_step(s, full, L)}
        if peer is not None:
            sides["peer"] = peer(L)
        times[L] = s.alternate(sides["local"], sides["global"])
        point = {"local_s": times[L][0], "global_s": times[L][1]}
        if peer is not None:
            point["peer_s"] = s.alternate(sides["local"], sides["peer"])[1]
        for name, fn in sides.items():
            point[f"{name}_peak_bytes"] = s.peak(fn)
        curve[str(L)] = point
    lo, hi = min(s.local_lengths), max(s.local_lengths)
    scale = times[hi][0] / times[lo][0]
    vs = times[hi][0] / times[hi][1]
    top, bottom = curve[str(hi)], curve[str(lo)]
    return [
        row("local_scaling", f"local attention (D=64), L={hi}, forward + backward",
            f"the same at L={lo}", times[hi][0], times[lo][0], scale,
            f"<= {9 * hi / lo / 8:g}", scale <= 9 * (hi / lo) / 8,
            top["local_peak_bytes"], bottom["local_peak_bytes"], curve=curve,
            peer_note=None if peer is not None else peers.missing("local_attention")),
        row("local_vs_global", f"local attention (D=64), L={hi}, forward + backward",
            f"global attention (fused SDPA), L={hi}", times[hi][0], times[hi][1], vs, "<= 0.2",
            vs <= 0.2, top["local_peak_bytes"], top["global_peak_bytes"]),
    ]


# ---- the front end ------------------------------------------------------------------------------

def frontend(s: Settings) -> list[dict]:
    """``taxcompile`` as a user runs it, a fresh process each time: ``table specs/`` with the
    row cache off (every spec parsed, checked and classified: the first run after an
    install) and on (taxcompile/cache.py), and ``compile specs/``. Each row also gives the
    interpreter's start alone (``interpreter_s``)."""
    # `python -m taxcompile` from the checkout: the code of this tree (an installed script
    # would run whatever checkout the environment was installed from, another worktree's)
    cmd = [sys.executable, "-m", "taxcompile"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # byte code written (as on a user's second run) even where the caller's environment
        # says not to
        user = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cold = {**user, "TAXCOMPILE_NO_CACHE": "1"}
        # the interpreter's own start (python -c pass), measured in the same run: the part of
        # every row that no change to taxcompile can cut
        start = median_time(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True,
                                                   env=user), max(3, s.repeats))
        for case, what, args, env, budget in (
                ("frontend_table_cold", "table specs/, no row cache", ["table", "specs/"], cold,
                 0.3),
                ("frontend_table", "table specs/, cached rows", ["table", "specs/"], user, 0.3),
                ("frontend_compile", "compile specs/", ["compile", "specs/", "-o", tmp], user,
                 2.0)):
            def call():
                subprocess.run(cmd + args, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                               env=env)
            call()  # the byte-code cache and the row cache written, as on a user's second run
            t = median_time(call, max(3, s.repeats))  # a fresh process: on the CPU
            rows.append(row(case, f"taxcompile {what} (wall time, fresh process)",
                            f"budget {budget} s", t, budget, t / budget, f"<= {budget} s",
                            t <= budget, interpreter_s=start))
    return rows


CASES = [mha_train, mha_infer, dot_vs_gemm, additive, local, frontend]

# Modules with more cases, each with a CASES list (their order is the table's); a module
# that does not exist is left out, so a case module can be added by naming it here.
CASE_MODULES = ("benchmarks.peers", "benchmarks.generate", "benchmarks.generate_terms",
                "benchmarks.decoder_keys",
                "benchmarks.positions", "benchmarks.lsh",
                "benchmarks.study", "benchmarks.spec_budget", "benchmarks.parse",
                "benchmarks.cold_start", "benchmarks.classify_meta")


def all_cases() -> list:
    """CASES, then those of every CASE_MODULES module present."""
    out = list(CASES)
    for name in CASE_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:  # the module is there but something it imports is not
                raise
            continue
        out.extend(module.CASES)
    return out
