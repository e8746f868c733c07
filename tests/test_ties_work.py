"""The checker's union of tied sizes (check/ties.py) does each union once: a list of sizes
that many operations read (a stack of layers reads each node along many paths) is joined
once, with one lookup of its first member's group, not one per member."""

from __future__ import annotations

import sys

from conftest import SPECS
from taxcompile import checks, lower, parser
from taxcompile.check import ties


def finds(spec_name: str) -> tuple[int, ties.Ties]:
    """The calls of ``tie_groups``'s ``find`` in one check of the spec, and its result."""
    text = (SPECS / spec_name).read_text(encoding="utf-8")
    spec = lower.lower(parser.parse_text(text, spec_name), spec_name, text)
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        if event == "call" and frame.f_code.co_name == "find" \
                and frame.f_code.co_filename == ties.__file__:
            calls += 1

    sys.setprofile(count)
    try:
        cs = checks.check(spec, text)
    finally:
        sys.setprofile(None)
    return calls, cs


def test_tied_sizes_are_joined_in_few_lookups():
    calls, cs = finds("yu2018.attn")  # QANet: 3 x 7 x 2 hops of layers, each reading the last
    nodes = sum(len(cm.model.nodes) for cm in cs.models)
    assert calls < 20 * nodes, (calls, nodes)  # 9,800 finds for its 156 nodes before
    # (which sizes are tied is read by the generated Config: compile specs/ --check)
