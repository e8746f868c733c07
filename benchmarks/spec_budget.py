"""The front end's budget (issue 23): `taxcompile check` of hostile 1 MB specs, whose cost
grew with their models (a one-line variant is a whole model again), stays within 10 s and
1 GiB (absolute budgets: read them on an idle machine), refused, located, past
``lower.MAX_SPEC_NODES`` / ``parser.MAX_MODELS``; and its time grows no faster than the
file's bytes (100 KB against 1 MB of the same kind, the same run)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIME_S, PEAK = 10.0, 1 << 30


def variants(size: int) -> str:
    """The transformer, then one-line variants of it up to ``size`` bytes."""
    parts = [(ROOT / "specs" / "vaswani2017.attn").read_text(encoding="utf-8")]
    n, total = 0, len(parts[0])
    while True:
        line = f"model v{n:05d} : transformer {{ let d_ff = {100 + n % 900} }}\n"
        if total + len(line) > size:
            return "".join(parts)
        parts.append(line)
        total, n = total + len(line), n + 1


def full_models(size: int) -> str:
    """Distinct full models (the transformer's body under new names) up to ``size`` bytes."""
    text = (ROOT / "specs" / "vaswani2017.attn").read_text(encoding="utf-8")
    head, body = text.split("model transformer {", 1)
    parts, n = [head], 0
    while sum(map(len, parts)) + len(body) + 20 < size:
        parts.append(f"model m{n:04d} {{" + body)
        n += 1
    return "".join(parts)


# A small parent runs the check: a child's peak RSS counts the parent's memory it was
# forked from (this process holds torch), the small parent's only a few MiB.
PROBE = """
import resource, subprocess, sys, time
start = time.perf_counter()
p = subprocess.run([sys.executable, "-m", "taxcompile", "check", sys.argv[1]],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
      p.returncode)
"""


def check(path: Path) -> tuple[float, int, int]:
    """Wall seconds, peak RSS bytes and exit code of `taxcompile check PATH`, a fresh process."""
    out = subprocess.run([sys.executable, "-c", PROBE, str(path)], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1]) * 1024, int(out[2])


def spec_budget(s) -> list[dict]:
    from .cases import row

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for name, make, size in (("variants_100k", variants, 100_000),
                                 ("variants_1m", variants, 990_000),
                                 ("full_100k", full_models, 100_000),
                                 ("full_1m", full_models, 990_000)):
            path = Path(tmp) / f"{name}.attn"
            path.write_text(make(size), encoding="utf-8")
            runs[name] = min((check(path) for _ in range(max(1, min(s.repeats, 2)))),
                             key=lambda r: r[0])
        for name in ("variants_1m", "full_1m"):
            t, peak, code = runs[name]
            rows.append(row(f"spec_budget_{name}", f"check of 1 MB of {name[:-3].replace('_', ' ')}"
                            f" (exit {code}: refused past the budget)", "budget 10 s, 1 GiB", t,
                            TIME_S, t / TIME_S, "<= 10 s and <= 1 GiB",
                            t <= TIME_S and peak <= PEAK, c_peak=peak, b_peak=PEAK))
        for kind in ("variants", "full"):  # against the same kind at a tenth of the bytes
            small, large = runs[f"{kind}_100k"][0], runs[f"{kind}_1m"][0]
            rows.append(row(f"spec_budget_scaling_{kind}", f"check of 1 MB of {kind}",
                            f"check of 100 KB of {kind}", large, small, large / small,
                            "<= 10 (linear in bytes)", large / small <= 10))
    return rows


CASES = [spec_budget]
