"""``python -m benchmarks.gpu [--device cpu|cuda] [--out DIR] [--only STAGE] [--models PATH]
[--budget STAGE=SECONDS]`` (``make gpu-check``): the GPU proof kit; see benchmarks/gpu/__init__.py
and docs/gpu.md."""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INSTALL = "pip install -e '.[bench]'"


def stages() -> dict:
    """name -> (function, budget on CUDA, budget on the CPU), in run order. The CUDA budgets
    sum to 390 s: with a child process started per stage (some 5 s each), under the 8
    minutes. torch.compile's stages may be cut on a cold compile cache (docs/gpu.md)."""
    from . import correctness, kernels, speed, throughput

    fns = {"correctness": correctness.stage, "kernels": kernels.stage,
           "kernels_flex": kernels.flex_stage,
           **speed.STAGES, **throughput.STAGES}
    cuda = {"correctness": 70, "kernels": 30, "kernels_flex": 40, "speed_encoder": 35,
            "speed_compile": 80, "speed_mha": 15, "speed_positions": 45, "speed_alignments": 20,
            "speed_gat": 15, "speed_generate": 30, "speed_core": 10}
    cpu = {"correctness": 90, "kernels": 60, "speed_compile": 60}  # caps on a busy machine
    return {n: (fns[n], cuda[n], cpu.get(n, 30)) for n in cuda}


def environment(device: str) -> dict:
    import torch

    env = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "torch": torch.__version__, "cuda": torch.version.cuda, "driver": None,
           "python": platform.python_version(), "threads": torch.get_num_threads(),
           "device_name": platform.processor() or platform.machine()}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(device_name=props.name, memory_gib=round(props.total_memory / 2 ** 30, 1),
                   capability=f"{props.major}.{props.minor}")
        if shutil.which("nvidia-smi"):
            p = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                "--format=csv,noheader"], capture_output=True, text=True)
            env["driver"] = p.stdout.strip().splitlines()[0] if p.returncode == 0 else None
    return env


def warm(models: list[str] | None, names: list[str]) -> None:
    """On the CPU, what every forked stage would otherwise load on its own: the models
    compiled, the peers imported, the profiler's lazy imports done."""
    import importlib

    import torch

    from ..harness import peak_bytes
    from .models import entries

    if {"correctness", "kernels", "kernels_flex"} & set(names):
        entries(models)
    if not any(n.startswith("speed") for n in names):
        return
    for name in ("x_transformers", "entmax", "torch_geometric.nn", "local_attention"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    peak_bytes(lambda: torch.ones(8) * 2)


class UsageError(Exception):
    """A command-line error: one line on stderr, exit 2."""


def budgets(args, table: dict) -> dict:
    out = {n: (cuda if args.device == "cuda" else cpu) for n, (_, cuda, cpu) in table.items()}
    for item in args.budget or []:
        name, _, seconds = item.partition("=")
        if name not in out:
            raise UsageError(f"--budget {item}: no stage `{name}` (stages: {', '.join(out)})")
        try:
            out[name] = float(seconds)
        except ValueError:
            out[name] = -1.0
        if not out[name] > 0:
            raise UsageError(f"--budget {item}: expected STAGE=SECONDS, a positive number")
    return out


def check_models(named: list[str] | None) -> None:
    """Every --models path exists and compiles (a spec's errors as taxcompile reports them)."""
    from taxcompile.diagnostics import SpecError

    from .models import entries

    for name in named or []:
        if not Path(name).exists():
            raise UsageError(f"--models {name}: no such file or folder")
    try:
        entries(named)
    except SpecError as e:
        raise UsageError(str(e)) from None
    except (OSError, SyntaxError, ImportError) as e:
        raise UsageError(f"--models: {type(e).__name__}: {e}") from None


def verdict(stage: dict) -> bool:
    """Whether a stage passed: it finished, and correctness / kernels rows are all ok (speed
    targets are reported, not asserted)."""
    if stage["status"] != "ok":
        return False
    if stage["stage"] in ("correctness", "kernels", "kernels_flex"):
        return bool(stage["rows"]) and all(r.get("ok") for r in stage["rows"])
    return True


def main(argv: list[str] | None = None) -> int:
    print(f"packages: {INSTALL}   (the peers, once, before the run)", flush=True)
    import torch

    from . import correctness, report
    from .stages import run_stage

    table = stages()
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__)
    ap.add_argument("--device", choices=("cpu", "cuda"),
                    default="cuda" if torch.cuda.is_available() else "cpu",
                    help="default: cuda where there is one, else cpu (small sizes)")
    ap.add_argument("--out", type=Path, default=Path("."),
                    help="folder of gpu-report.json and gpu-report.md (default: .)")
    ap.add_argument("--only", action="append", choices=list(table), help="run only these stages")
    ap.add_argument("--models", action="append", metavar="PATH",
                    help="the correctness and kernels stages on these specs or generated .py "
                         "files instead of every model of specs/ and examples/")
    ap.add_argument("--budget", action="append", metavar="STAGE=SECONDS",
                    help="another time budget for a stage")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"--device cuda: CUDA is not available (torch {torch.__version__})",
              file=sys.stderr)
        return 2
    try:
        limits = budgets(args, table)
        if args.models:
            check_models(args.models)
    except UsageError as e:
        print(f"python -m benchmarks.gpu: error: {e}", file=sys.stderr)
        return 2
    small = args.device == "cpu"
    env = environment(args.device)
    print(f"{env['device_name']}, torch {env['torch']}, CUDA {env['cuda']}, driver "
          f"{env['driver']}; {env['date']}", flush=True)
    # torch's own bf16 gaps on this CPU, probed once: a model's bf16 run that raises the same
    # error is reported as skipped (never on CUDA)
    probe = correctness.probe_recurrent(args.device)
    for kind, error in probe.items():
        print(f"nn.{kind} under CPU bf16 autocast: {error.splitlines()[0]}", flush=True)
    options = {"models": args.models, "recurrent_probe": probe}
    chosen = [n for n in table if not args.only or n in args.only]
    if args.device == "cpu":  # done once here; the forked stages inherit it
        warm(args.models, chosen)
    start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
        for name in chosen:
            fn = table[name][0]
            r = run_stage(name, fn, limits[name], args.device, small, Path(work), options)
            r["ok"] = verdict(r)
            results.append(r)
            print(f"  {name}: {r['status']}, {r['seconds']:.1f} s of {limits[name]:g} s, "
                  f"{len(r['rows'])} rows{'' if r['ok'] else ' (FAILED)'}", flush=True)
    rep = {"device": args.device, "small": small, "environment": env, "install": INSTALL,
           "seconds": time.perf_counter() - start, "tolerance": correctness.TOLERANCE,
           "recurrent_probe": probe,
           "stages": results, "ok": all(r["ok"] for r in results)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu-report.json").write_text(json.dumps(rep, indent=1, default=str) + "\n",
                                              encoding="utf-8")
    md = report.markdown(rep)
    (args.out / "gpu-report.md").write_text(md, encoding="utf-8")
    print(f"{rep['seconds']:.0f} s; wrote {args.out / 'gpu-report.json'} and "
          f"{args.out / 'gpu-report.md'}: {'pass' if rep['ok'] else 'FAIL'}")
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
