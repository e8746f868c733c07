"""One parser: lark, building the AST while it parses, against the front end of another
git revision (``BASELINE_REF``: main when its hand-written fast reader was replaced by
lark's parse, a fixed revision so that the comparison holds after the merge), measured in
the same run, the two sides alternating, each a fresh process from its own
tree (the baseline's files are ``git archive``d into a temporary folder).

Rows: the cold ``table specs/`` (``TAXCOMPILE_NO_CACHE=1``: every spec parsed, checked and
classified; its budget, 0.3 s, is for an idle 2-core machine, so the ratio is the figure
to read on a loaded one), and the parse of specs/ alone inside one process, its first
round (lark imported and its cached tables loaded) and a warm one. Both sides read this
checkout's specs and must print the same table."""

from __future__ import annotations

import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE_REF = "41d4674c9167"  # main with taxcompile/fastparse.py
BUDGET_S = 0.3

# One process: the parse of every spec in SPECS, first round then the best of three more.
PROBE = """
import sys, time
sys.path.insert(0, ".")
from pathlib import Path
from taxcompile import parser
texts = [(str(p), p.read_text(encoding="utf-8")) for p in sorted(Path(sys.argv[1]).glob("*.attn"))]
def once():
    start = time.perf_counter()
    for name, text in texts:
        parser.parse_text(text, name)
    return time.perf_counter() - start
first = once()
print(first, min(once() for _ in range(3)))
"""


def baseline_tree(ref: str, dest: Path) -> Path | None:
    """``ref``'s package and grammar, extracted into ``dest``; None where git or the
    revision is missing."""
    try:
        p = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ref,
                            "taxcompile", "grammar"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    with tarfile.open(fileobj=io.BytesIO(p.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def _table(tree: Path, env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "taxcompile", "table", str(ROOT / "specs")],
                       cwd=tree, env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, p.stdout


def _parse(tree: Path, env: dict) -> tuple[float, float]:
    p = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "specs")], cwd=tree, env=env,
                       capture_output=True, text=True, check=True)
    first, warm = p.stdout.split()
    return float(first), float(warm)


def measure(repeats: int, ref: str = BASELINE_REF) -> dict | None:
    """Medians of both sides, alternating (one warm-up each: byte code and the grammar's
    cached tables written, as on a user's second run); None without the baseline."""
    with tempfile.TemporaryDirectory() as tmp:
        base = baseline_tree(ref, Path(tmp) / "baseline")
        if base is None:
            return None
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(TAXCOMPILE_NO_CACHE="1", TAXCOMPILE_CACHE_DIR=str(Path(tmp) / "cache"))
        sides = {"candidate": ROOT, "baseline": base}
        out = {side: {"table": [], "first": [], "warm": []} for side in sides}
        printed = {}
        for n in range(repeats + 1):
            for side, tree in sides.items():
                t, printed[side] = _table(tree, env)
                first, warm = _parse(tree, env)
                if n:  # the first round is the warm-up
                    out[side]["table"].append(t)
                    out[side]["first"].append(first)
                    out[side]["warm"].append(warm)
        if printed["candidate"] != printed["baseline"]:
            raise AssertionError(f"the table of specs/ differs from {ref}'s")
        return {side: {k: statistics.median(v) for k, v in figures.items()}
                for side, figures in out.items()}


def parse_vs_main(s) -> list[dict]:
    from .cases import row, skipped

    figures = measure(max(3, s.repeats))
    if figures is None:
        return [skipped("parse_table_cold", "table specs/, no row cache", BASELINE_REF,
                        f"<= {BUDGET_S} s idle", f"no git revision {BASELINE_REF!r} to compare")]
    c, b = figures["candidate"], figures["baseline"]
    return [
        row("parse_table_cold", "table specs/, no row cache (wall time, fresh process)",
            f"the same, main at {BASELINE_REF}", c["table"], b["table"], c["table"] / b["table"],
            f"<= {BUDGET_S} s idle", c["table"] <= BUDGET_S),
        row("parse_specs_first", "parse of specs/ in one process, first round (lark loaded)",
            f"the same, main at {BASELINE_REF}", c["first"], b["first"], c["first"] / b["first"],
            "informative", None),
        row("parse_specs_warm", "parse of specs/ in one process, warm",
            f"the same, main at {BASELINE_REF}", c["warm"], b["warm"], c["warm"] / b["warm"],
            "informative", None),
    ]


CASES = [parse_vs_main]


if __name__ == "__main__":  # python -m benchmarks.parse [REPEATS [REF]]: the figures alone
    result = measure(int(sys.argv[1]) if len(sys.argv) > 1 else 5,
                     sys.argv[2] if len(sys.argv) > 2 else BASELINE_REF)
    for side, figures in (result or {}).items():
        print(side, " ".join(f"{k} {v * 1000:.1f} ms" for k, v in figures.items()))
