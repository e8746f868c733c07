"""``python -m benchmarks [--quick] [--json PATH] [--plot PATH] [--only CASE]``"""

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


def table(rows: list[dict]) -> str:
    head = ["case", "candidate", "baseline", "ratio", "target", "met", "peak (cand / base)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        met = {True: "yes", False: "**no**", None: ""}[r["met"]]
        peak = " / ".join(x for x in (fmt_bytes(r["candidate_peak_bytes"]),
                                      fmt_bytes(r["baseline_peak_bytes"])) if x)
        lines.append(f"| `{r['case']}` | {r['candidate_s'] * 1e3:.1f} ms | {r['baseline_s'] * 1e3:.1f} ms "
                     f"| {r['ratio']:.3f} | {r['target']} | {met} | {peak} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = next(r["curve"] for r in rows if r["case"] == "local_scaling")
    L = sorted(int(k) for k in curve)
    loc = [curve[str(n)]["local_s"] * 1e3 for n in L]
    full = [curve[str(n)]["global_s"] * 1e3 for n in L]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.loglog(L, full, "o-", label="global (fused SDPA)")
    ax.loglog(L, loc, "s-", label="local, D = 64 (banded)")
    ax.loglog(L, [loc[0] * n / L[0] for n in L], ":", color="gray", label="O(L) from the first point")
    ax.set_xlabel("sequence length L")
    ax.set_ylabel("forward + backward (ms)")
    ax.set_title("Local vs global self-attention, CPU")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer repeats (under 3 minutes on 2 cores)")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--plot", type=Path, default=Path("local_scaling.png"),
                    help="PNG of the local-attention scaling case (default: %(default)s)")
    ap.add_argument("--only", action="append", help="run only these case functions")
    args = ap.parse_args(argv)
    settings = cases.Settings(repeats=7 if args.quick else 15,
                              local_lengths=(1024, 2048, 4096, 8192))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}, "
          f"{'quick' if args.quick else 'full'} run", flush=True)
    rows, start = [], time.perf_counter()
    for case in cases.CASES:
        if args.only and case.__name__ not in args.only:
            continue
        t = time.perf_counter()
        rows.extend(case(settings))
        print(f"  {case.__name__}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    print(table(rows))
    print(f"\n{time.perf_counter() - start:.0f} s in all")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    if any(r["case"] == "local_scaling" for r in rows):
        plot(rows, args.plot)
        print(f"plot: {args.plot}")
    missed = [r["case"] for r in rows if r["met"] is False]
    if missed:
        print("targets missed: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
