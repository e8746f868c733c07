"""benchmarks/cold_start.py measures what it says: both sides in fresh processes, the
table's row cache off, its CPU above the bare import of lark it includes (timing itself
is not checked here: `python -m benchmarks.cold_start`)."""

from __future__ import annotations

from benchmarks import cold_start


def test_both_sides_are_measured_in_the_same_run():
    f = cold_start.measure(1)
    assert set(f) == {"table_wall", "table_cpu", "lark_wall", "lark_cpu", "ratio"}
    assert 0 < f["lark_cpu"] < f["table_cpu"] and f["ratio"] > 1  # the table imports lark
    assert cold_start.SIDES["table"][-2:] == ["table", "specs/"]
