"""The front end imports lark without the third-party ``regex`` module (some 20 ms of a
cold ``table specs/``), and leaves ``regex`` importable afterwards."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()


def test_parsing_a_spec_does_not_import_regex():
    code = ("import sys; from taxcompile import parser; "
            "parser.parse_text(open('specs/bahdanau2015.attn').read()); "
            "print('regex' in sys.modules, 'lark' in sys.modules)")
    assert _run(code) == "False True"


def test_regex_stays_importable_after_lark():
    pytest.importorskip("regex")
    code = ("import sys, taxcompile.astbuilder, regex; "
            "print(type(sys.modules['regex']).__name__, regex.match('a+', 'aa').group())")
    assert _run(code) == "module aa"
