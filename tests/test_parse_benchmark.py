"""benchmarks/parse.py measures what it says: both sides, each from its own tree, the
same table printed (timing is not checked here: `python -m benchmarks.parse`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks import parse

ROOT = Path(__file__).resolve().parent.parent


def test_the_baseline_is_the_revisions_own_parser(tmp_path):
    base = parse.baseline_tree("HEAD", tmp_path / "b")
    assert base is not None
    assert (base / "taxcompile" / "parser.py").read_bytes() == subprocess.run(
        ["git", "-C", str(ROOT), "show", "HEAD:taxcompile/parser.py"], capture_output=True,
        check=True).stdout
    assert (base / "grammar" / "attn.lark").is_file()
    code = "import taxcompile.parser as p; print(p.__file__)"
    where = subprocess.run([sys.executable, "-c", code], cwd=base, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert Path(where).resolve().is_relative_to(base.resolve())  # its code, not this tree's
    assert parse.baseline_tree("no-such-revision-here", tmp_path / "c") is None


def test_both_sides_are_measured_and_print_the_same_table():
    figures = parse.measure(1, ref="HEAD")
    assert figures is not None and set(figures) == {"candidate", "baseline"}
    for side in figures.values():
        assert set(side) == {"table", "first", "warm"}
        assert 0 < side["warm"] <= side["first"] < side["table"]
