"""``python -m benchmarks [--quick] [--json PATH] [--plot DIR] [--only CASE] [--device cpu|cuda]
[--dtype fp32|bf16]``: the generated code against its baselines and peers, measured in the
same run; matplotlib is imported only with --plot."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

from . import cases


def fmt_bytes(n) -> str:
    return "" if n is None else f"{n / 2 ** 20:.0f} MiB"


def fmt_s(t) -> str:
    return "" if t is None else f"{t * 1e3:.1f} ms"


def table(rows: list[dict]) -> str:
    head = ["case", "candidate", "baseline", "ratio", "target", "met", "peak (cand / base)",
            "equivalence"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        met = {True: "yes", False: "**no**", None: ""}[r["met"]]
        peak = " / ".join(x for x in (fmt_bytes(r["candidate_peak_bytes"]),
                                      fmt_bytes(r["baseline_peak_bytes"])) if x)
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3f}"
        if r.get("skipped") and r["ratio"] is None:
            met = met or "skipped"
            ratio = f"skipped: {r['skipped']}"
        lines.append(f"| `{r['case']}` | {fmt_s(r['candidate_s'])} | {fmt_s(r['baseline_s'])} "
                     f"| {ratio} | {r['target']} | {met} | {peak} | {r.get('equivalence', '')} |")
    return "\n".join(lines)


def plot(rows: list[dict], folder: Path, label: str) -> list[Path]:
    """PNG scaling curves in ``folder``: bench_local_scaling.png (time and peak memory vs L:
    local, global, the local-attention package), and bench_graph_scaling.png (vs N x degree)
    when the graph-attention row produced a curve. matplotlib is imported only here."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    curves = [("local_scaling", "bench_local_scaling.png", "sequence length L",
               [("global", "global (fused SDPA)", "o-"), ("local", "local, D = 64 (ours)", "s-"),
                ("peer", "local_attention.LocalAttention", "^--")],
               "Local vs global self-attention"),
              ("gat_vs_gatconv", "bench_graph_scaling.png", "edges N x degree",
               [("ours", "graph attention (ours)", "s-"), ("peer", "GATConv", "^--")],
               "Graph attention vs GATConv")]
    for case, name, xlabel, sides, title in curves:
        curve = next((r.get("curve") for r in rows if r["case"] == case and r.get("curve")), None)
        if not curve:
            continue
        xs = sorted(int(k) for k in curve)
        fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
        for side, text, style in sides:
            if f"{side}_s" not in curve[str(xs[0])]:
                continue
            ax_t.loglog(xs, [curve[str(n)][f"{side}_s"] * 1e3 for n in xs], style, label=text)
            ax_m.loglog(xs, [max(curve[str(n)][f"{side}_peak_bytes"], 1) / 2 ** 20 for n in xs],
                        style, label=text)
        ax_t.set_ylabel("forward + backward (ms)")
        ax_m.set_ylabel("peak memory (MiB)")
        for ax in (ax_t, ax_m):
            ax.set_xlabel(xlabel)
            ax.legend(fontsize=8)
        fig.suptitle(f"{title}, {label}")
        fig.tight_layout()
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)
        written.append(folder / name)
    return written


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    ap.add_argument("--quick", action="store_true",
                    help="fewer repeats and shorter local-attention curve (a few minutes on 2 cores)")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--plot", type=Path, metavar="DIR",
                    help="write the scaling curves as PNG files into DIR (imports matplotlib; "
                         "without --plot nothing is plotted)")
    ap.add_argument("--only", action="append", help="run only these case functions")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="where every row runs (default: %(default)s)")
    ap.add_argument("--dtype", default="fp32", choices=tuple(DTYPES),
                    help="the dtype of every model and input (default: %(default)s)")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: CUDA is not available on this machine "
              f"(torch {torch.__version__}); no rows were run.")
        return 0
    device = torch.device(args.device)
    settings = cases.Settings(repeats=3 if args.quick else 7,
                              local_lengths=(1024, 4096) if args.quick else (1024, 2048, 4096, 8192),
                              device=device, dtype=DTYPES[args.dtype], quick=args.quick)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        (platform.processor() or platform.machine())
    label = f"{args.device} {args.dtype}"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {where}, {label}, "
          f"{'quick' if args.quick else 'full'} run", flush=True)
    rows, start = [], time.perf_counter()
    for case in cases.all_cases():
        if args.only and case.__name__ not in args.only:
            continue
        t = time.perf_counter()
        try:
            rows.extend(case(settings))
        except Exception as e:  # one broken case must not hide the others' rows
            rows.append(cases.row(case.__name__, "", "", None, None, None, "", False,
                                  skipped=f"error: {type(e).__name__}: {e}"))
        print(f"  {case.__name__}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
        if args.json:  # after every case, so an interrupted run keeps its rows
            args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    print(table(rows))
    print(f"\n{time.perf_counter() - start:.0f} s in all")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    if args.plot:
        for path in plot(rows, args.plot, label):
            print(f"plot: {path}")
    missed = [r["case"] for r in rows if r["met"] is False]
    if missed:
        print("targets missed: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
