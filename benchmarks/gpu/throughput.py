"""generate() with the KV cache against re-running the prefix, and the attention core's
TFLOP/s against a dense GEMM's, measured in the same run on the same device and dtype."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from taxcompile import run

from ..cases import build, row
from ..harness import alternate, median_time, peak_bytes
from .speed import settings, size

ROOT = Path(__file__).resolve().parents[2]


def generate(ctx) -> None:
    """vaswani2017's Transformer: generate() with the cache against incremental=False."""
    s, e = settings(ctx), size(ctx, "generate")
    path = ROOT / "generated" / "vaswani2017_transformer.py"
    mod = run.load_module(path.read_text(encoding="utf-8"), "gpu_check_generate")
    torch.manual_seed(0)
    cfg = mod.Config(**{k: e[k] for k in ("d_model", "heads", "layers", "d_ff", "vocab")})
    model = s.put(mod.Model(cfg).eval())
    src = torch.randint(3, cfg.vocab, (e["B"], e["src"]),
                        generator=torch.Generator().manual_seed(1)).to(s.device)

    def call(incremental: bool):
        def go():
            with torch.no_grad():  # eos = 2 never comes from a random model often: full length
                return model.generate(src, max_len=e["tokens"], bos=1, eos=2,
                                      incremental=incremental)
        return go
    inc, full = call(True), call(False)
    a, b = inc(), full()
    same = a.shape == b.shape and torch.equal(a, b)
    c, f = alternate(inc, full, 1 if s.quick else 2, warmup=0, device=s.device)
    ctx.emit(row("generate_kv_cache", f"vaswani2017 generate(), KV cache, B {e['B']}, "
                 f"{e['tokens']} tokens, d {e['d_model']}, {e['layers']} layers",
                 "generate(incremental=False): the prefix re-run per token", c, f, c / f,
                 "<= 0.5", c / f <= 0.5 and same, peak_bytes(inc, s.device),
                 peak_bytes(full, s.device),
                 equivalence="the same tokens" if same else "**different tokens**"))


def core_vs_gemm(ctx) -> None:
    """The generated scaled dot-product core (benchmarks/specs/dot.attn, B x H sequences of
    width D) forward, its TFLOP/s (4 L^2 D multiply-adds x 2 per sequence) against an n x n
    dense GEMM's (2 n^3), same dtype, same run."""
    s, e = settings(ctx), size(ctx, "core")
    B, H, L, D, n = (e[k] for k in ("B", "H", "L", "D", "n"))
    mod = build("dot.attn", "dot")
    model = s.put(mod.Model(mod.Config(d=D)).eval())
    q, k, v = (s.randn(B * H, L, D) for _ in range(3))

    def core():
        with torch.no_grad():
            return model(q=q, k=k, v=v).output
    with torch.no_grad():
        ref = ((q.float() @ k.float().transpose(1, 2)) / math.sqrt(D)).softmax(-1) @ v.float()
        err = ((core().float() - ref).norm() / ref.norm()).item()
    a, b = s.randn(n, n), s.randn(n, n)
    t_core = median_time(core, s.repeats, device=s.device)
    t_mm = median_time(lambda: a @ b, s.repeats, device=s.device)
    core_tflops = 4 * B * H * L * L * D / t_core / 1e12
    mm_tflops = 2 * n ** 3 / t_mm / 1e12
    ratio = core_tflops / mm_tflops
    tol = 1e-4 if s.dtype == torch.float32 else 2e-2
    ctx.emit(row("core_vs_gemm", f"generated attention core forward, B {B} H {H} L {L} D {D}",
                 f"dense {n}x{n} GEMM", t_core, t_mm, ratio, ">= 0.7 (TFLOP/s ratio)",
                 ratio >= 0.7 and err <= tol, peak_bytes(core, s.device), None,
                 candidate_tflops=core_tflops, baseline_tflops=mm_tflops,
                 dtype=str(s.dtype).replace("torch.", ""),
                 equivalence=f"relative error {err:.1e} against softmax(QK^T/sqrt(d))V in "
                             f"float32 (tol {tol:g})"))


STAGES = {"speed_generate": generate, "speed_core": core_vs_gemm}
