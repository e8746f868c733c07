"""The command line builds only the subcommand it runs (the others are stubs for
``taxcompile --help``), and parses, helps and refuses exactly as the full parser does."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from taxcompile import cli

ARGVS = [["table", "specs/", "--format", "csv", "--all"], ["check", "a.attn", "b.attn"],
         ["classify", "--reading", "text", "x.attn"], ["compile", "specs/", "--check"],
         ["report", "specs/", "--jobs", "2", "--train-steps", "0"], ["lsp"],
         ["train", "x.attn", "--out", "c.pt"], ["fmt", "--check", "x.attn"],
         ["new", "demo", "--force"], ["schema", "classify"], ["graph", "x.attn"],
         ["diagram", "x.attn", "-o", "x.svg"], ["lift", "--torch", "m:f"]]


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices


def _run(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[object, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            result = vars(parser.parse_args(argv))
        except SystemExit as e:
            result = e.code
    return result, out.getvalue(), err.getvalue()


def test_every_subcommand_is_known_but_only_the_one_run_is_built():
    full, one = _subparsers(cli.make_parser()), _subparsers(cli.make_parser("table"))
    assert list(one) == list(full)
    assert len(one["table"]._actions) == len(full["table"]._actions) > 1
    assert all(not p._actions for name, p in one.items() if name != "table")


@pytest.mark.parametrize("argv", ARGVS, ids=lambda a: a[0])
def test_one_subcommand_parses_as_the_full_parser(argv):
    assert _run(cli.make_parser(argv[0]), argv) == _run(cli.make_parser(), argv)


@pytest.mark.parametrize("argv", [["--help"], ["table", "--help"], ["train", "--help"],
                                  ["table", "--bogus", "specs/"], ["check"], ["tabel", "x"],
                                  ["classify", "--format", "yaml", "x.attn"], ["--version"]])
def test_help_and_usage_errors_are_the_full_parsers(argv):
    full = _run(cli.make_parser(), argv)
    assert full[0] in (0, 2)
    assert _run(cli.make_parser(argv[0]), argv) == full
