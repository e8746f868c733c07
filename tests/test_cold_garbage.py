"""A cold ``table specs/`` leaves no cycles for the collector: a spec's AST and IR go
with their last reference (a recursive closure would keep them in a cycle, and the
collections walking them were some 15 ms of the run); the command line pauses the
collector over the specs and collects only when many objects have piled up."""

from __future__ import annotations

import gc
import io
from contextlib import redirect_stdout
from pathlib import Path

from taxcompile import cli

ROOT = Path(__file__).resolve().parent.parent


def _table(monkeypatch, tmp_path) -> list[int]:
    """The generations collected while the command line reads specs/ (front end loaded)."""
    monkeypatch.setenv("TAXCOMPILE_NO_CACHE", "1")
    monkeypatch.setenv("TAXCOMPILE_CACHE_DIR", str(tmp_path))
    monkeypatch.chdir(ROOT)
    cli._front_end()
    seen: list[int] = []
    reading = []  # from the first spec on (argparse's parsers are made before)
    upto = [0]  # collections before the last spec's row was made
    entry = cli._table_entry

    def first(*args):
        reading.append(True)
        try:
            return entry(*args)
        finally:
            upto[0] = len(seen)

    def count(phase, info):
        if phase == "start" and reading:
            seen.append(info["generation"])

    monkeypatch.setattr(cli, "_table_entry", first)

    was = gc.isenabled()
    gc.enable()
    gc.callbacks.append(count)
    try:
        with redirect_stdout(io.StringIO()):
            assert cli.main(["table", "specs/"]) == 0
    finally:
        gc.callbacks.remove(count)
        (gc.enable if was else gc.disable)()
    return seen[:upto[0]]


def test_reading_the_specs_leaves_no_cycles_of_its_own():
    cli._front_end()
    gc.collect()
    flags = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for spec in sorted((ROOT / "specs").glob("*.attn")):
            cli._table_entry(spec, None, "table")
        gc.collect()
        ours = [o for o in gc.garbage if type(o).__module__.startswith("taxcompile")
                or "taxcompile" in getattr(getattr(o, "__code__", None), "co_filename", "")]
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
    assert ours == []


def test_the_collector_waits_until_specs_pile_up(monkeypatch, tmp_path):
    assert _table(monkeypatch, tmp_path) == []  # 18 specs: no collection at all
    monkeypatch.setattr(cli, "GARBAGE_LIMIT", -1)
    assert len(_table(monkeypatch, tmp_path)) >= len(list((ROOT / "specs").glob("*.attn"))) - 1
