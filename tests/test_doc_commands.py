"""Every `taxcompile COMMAND` the docs show names a real subcommand: docs/language.md told
readers to export a drop-in layer with `taxcompile layer`, which does not exist (the export
is `taxcompile compile SPEC --layer NAME -o FILE`)."""

from __future__ import annotations

import argparse
import re

from conftest import ROOT

from taxcompile.cli import make_parser

INLINE = re.compile(r"`taxcompile ([a-z][\w-]*)")  # `taxcompile check …` in the prose
LINE = re.compile(r"^\s*(?:\$\s*)?taxcompile ([a-z][\w-]*)", re.M)  # a command in a code block


def shown(text: str) -> set[str]:
    """The subcommands `text` (Markdown) shows: inline code anywhere, and code blocks' lines
    that start with the command (prose lines may start with the word taxcompile)."""
    words = set(INLINE.findall(text))
    for block in text.split("```")[1::2]:
        words |= set(LINE.findall(block))
    return words


def test_the_docs_name_only_real_subcommands():
    sub = next(a for a in make_parser()._actions if isinstance(a, argparse._SubParsersAction))
    real = set(sub.choices)
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        unknown = shown(path.read_text(encoding="utf-8")) - real
        assert not unknown, f"{path.relative_to(ROOT)}: no such subcommand: {sorted(unknown)}"


def test_the_check_reads_inline_code_and_code_blocks():
    text = "Use `taxcompile layer x`.\n```\n$ taxcompile grph a\n```\ntaxcompile writes it.\n"
    assert shown(text) == {"layer", "grph"}
