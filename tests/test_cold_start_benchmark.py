"""benchmarks/cold_start.py measures what it says: both sides in fresh processes, the
table's row cache off, its CPU above the bare import of lark it includes (timing itself
is not checked here: `python -m benchmarks.cold_start`)."""

from __future__ import annotations

import subprocess

import pytest

from benchmarks import cold_start


def test_both_sides_are_measured_in_the_same_run():
    f = cold_start.measure(1)
    assert set(f) == {"table_wall", "table_cpu", "lark_wall", "lark_cpu", "ratio"}
    assert 0 < f["lark_cpu"] < f["table_cpu"] and f["ratio"] > 1  # the table imports lark
    assert cold_start.SIDES["table"][-2:] == ["table", "specs/"]


def test_against_another_checkout_runs_its_table_in_the_same_run(tmp_path):
    """``--against DIR``: DIR's table is the third side; a checkout measured against itself
    saves about nothing."""
    f = cold_start.measure(1, against=cold_start.ROOT)
    assert {"base_wall", "base_cpu", "base_ratio", "saved"} <= set(f)
    assert f["base_cpu"] > f["lark_cpu"] and f["base_ratio"] > 1
    assert abs(f["saved"]) < 0.5 * f["table_cpu"]
    with pytest.raises(subprocess.CalledProcessError):  # a DIR without specs/: refused
        cold_start.measure(1, against=tmp_path)
