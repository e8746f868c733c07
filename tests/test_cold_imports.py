"""A cold ``taxcompile table`` (no row cache) imports only what the table needs: not the
other subcommands' arguments (``train``'s are in train_cli), not json (the row cache's and
``graph --format json``'s). benchmarks/cold_start.py measures what that saves."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

UNNEEDED = ("json", "taxcompile.train_cli", "torch")


def test_a_cold_table_imports_neither_json_nor_train_arguments(tmp_path):
    code = ("import sys; from taxcompile.cli import main; "
            "sys.argv = ['taxcompile', 'table', 'specs/', '--format', 'csv']; r = main(); "
            "print(r, sorted(sys.modules), file=sys.stderr)")
    env = dict(os.environ, TAXCOMPILE_NO_CACHE="1", TAXCOMPILE_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env=env)
    rc, _, modules = p.stderr.strip().splitlines()[-1].partition(" ")
    assert rc == "0" and "Vaswani et al." in p.stdout, p.stderr
    assert "'taxcompile.checks'" in modules  # the front end ran
    assert [m for m in UNNEEDED if f"'{m}'" in modules] == []
