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



_COUNT_COLLECTIONS = """
import gc, runpy, sys
n = [0]
def count(phase, info):  # a collection started while a taxcompile module's body runs
    try:
        f = sys._getframe(1)
    except ValueError:  # no Python frame: the interpreter's own (at exit)
        return
    while f is not None:
        name = f.f_code.co_filename.replace("\\\\", "/")
        if f.f_code.co_name == "<module>" and "/taxcompile/" in name \\
                and not name.endswith("__main__.py"):
            n[0] += phase == "start"
            break
        f = f.f_back
gc.callbacks.append(count)
sys.argv = ["taxcompile", "--version"]
try:
    runpy.run_module("taxcompile", run_name="__main__")
except SystemExit:
    pass
print("collections", n[0], gc.isenabled(), file=sys.stderr)
"""


def test_no_collection_walks_the_command_lines_modules_while_they_load():
    """``python -m taxcompile``: the cyclic collector is paused while taxcompile.cli and
    the modules it imports load (they live as long as the process), and runs again after."""
    p = subprocess.run([sys.executable, "-c", _COUNT_COLLECTIONS], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert "taxcompile " in p.stdout and "collections 0 True" in p.stderr, p.stderr
