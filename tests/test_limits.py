"""Hostile sizes: endless input streams, huge flat expressions, out-of-range constants.
Each is one located error (or a working model), never a traceback or a memory blow-up."""

from __future__ import annotations

import ast
import random
import subprocess
import sys
from pathlib import Path

import pytest

from taxcompile import codegen, lower, parser, pipeline
from taxcompile.diagnostics import SpecError

ROOT = Path(__file__).resolve().parent.parent
PAPER = 'paper p { cite = "X" }\n'
MODEL = ("model m {\n"
         "    input src: tokens[S] (vocab = 100)\n"
         "    feature x = embed(src, d)\n"
         "    attention a { query = project(x)  keys = x  score = multiplicative }\n"
         "}\n")


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "taxcompile", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


# ---- endless and huge inputs are read only up to the limit ------------------------------

MAX_RSS_PROBE = """
import resource, subprocess, sys
p = subprocess.run([sys.executable, "-m", "taxcompile", *sys.argv[1:]], capture_output=True,
                   text=True, timeout=60)
print(p.returncode)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)  # KiB on Linux
sys.stderr.write(p.stderr)
"""


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
@pytest.mark.parametrize("command", ["check", "fmt", "compile"])
def test_dev_zero_stays_small(command):
    """`check /dev/zero` read the whole endless stream before applying the 1 MB limit
    (8.6 GB in 20 s). Measured in a fresh process, so that only this command counts."""
    p = subprocess.run([sys.executable, "-c", MAX_RSS_PROBE, command, "/dev/zero"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    code, rss_kib = (int(x) for x in p.stdout.split())
    assert rss_kib < 100 * 1024, f"{command} /dev/zero: max RSS {rss_kib // 1024} MiB"
    assert "Traceback" not in p.stderr, p.stderr
    if command == "fmt":  # fmt rewrites its files: a device is no spec file
        assert code == 2 and p.stderr == "taxcompile: error: /dev/zero is not a regular file\n"
    else:
        assert code == 1, p.stderr
        assert p.stderr.startswith(
            f"/dev/zero:1:1: error: file is too large (more than {parser.MAX_BYTES:,} bytes; "
            f"the limit is {parser.MAX_BYTES:,})\n"), p.stderr


def test_a_large_file_reports_its_size_but_is_read_only_up_to_the_limit(tmp_path, monkeypatch):
    big = tmp_path / "big.attn"
    big.write_bytes(b"#" * (3 * parser.MAX_BYTES))
    data, size = parser.read_bytes(big)
    assert len(data) == parser.MAX_BYTES + 1 and size == 3 * parser.MAX_BYTES
    with pytest.raises(SpecError) as info:
        pipeline.load(big)
    assert info.value.diagnostics[0].message == (
        f"file is too large ({3 * parser.MAX_BYTES:,} bytes; the limit is {parser.MAX_BYTES:,})")


def test_a_file_of_exactly_the_limit_is_read():
    text = PAPER + "let d = 8\n" + MODEL
    text += "#" * (parser.MAX_BYTES - len(text.encode()) - 1) + "\n"
    assert len(text.encode()) == parser.MAX_BYTES
    assert pipeline.load_text(text, "x.attn").models


# ---- a flat sum of many terms is an error at its own line --------------------------------


def test_flat_sum_of_100000_terms_is_located(tmp_path):
    f = tmp_path / "sum.attn"
    f.write_text(PAPER + "let d = " + " + ".join(["1"] * 100_000) + "\n" + MODEL)
    p = cli("check", str(f))
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    first = p.stderr.splitlines()[0]
    assert first == (f"{f}:2:9: error: expression nested more than {parser.MAX_EXPR_DEPTH} "
                     "deep (each operator and call counts: `a + b + c` is 2 deep)"), first
    assert "hint: split it into `let` constants or `feature` statements" in p.stderr


@pytest.mark.parametrize("expr, ok", [
    (" + ".join(["a"] * (parser.MAX_EXPR_DEPTH + 1)), True),    # 256 operators
    (" + ".join(["a"] * (parser.MAX_EXPR_DEPTH + 2)), False),   # 257
    ("-" * parser.MAX_EXPR_DEPTH + "a", True),
    ("-" * (parser.MAX_EXPR_DEPTH + 1) + "a", False),
    (" * ".join(["a"] * 200) + " + " + " / ".join(["a"] * 57), True),
])
def test_the_expression_depth_limit(expr, ok):
    text = PAPER + "let a = 1\nlet d = " + expr + "\n" + MODEL
    if not ok:
        with pytest.raises(SpecError) as info:
            pipeline.load_text(text, "x.attn")
        d = info.value.diagnostics[0]
        assert (d.loc.line, d.loc.column) == (3, 9) and "nested more than" in d.message
        return
    cs = pipeline.load_text(text, "x.attn")
    src = codegen.generate(cs, cs.models[0], "x.attn")
    ast.parse(src)  # no "too many nested parentheses": chains stay flat in Config


def _eval(text: str, env: dict) -> float:
    return eval(compile(text, "<sym>", "eval"), {"__builtins__": {}}, dict(env))


def test_constant_expressions_keep_their_value_in_the_generated_config():
    """``lower.sym`` writes only the parentheses Python needs; the text must still mean
    what the spec says (``//`` and unary minus included)."""
    rnd = random.Random(11)
    names = {"a": 7, "b": 3, "c": 12}

    def expr(depth: int) -> str:
        if depth == 0 or rnd.random() < 0.2:
            return rnd.choice(list(names) + ["2", "5"])
        kind = rnd.random()
        if kind < 0.15:
            return "-" + expr(depth - 1)
        if kind < 0.3:
            return "(" + expr(depth - 1) + ")"
        return f"{expr(depth - 1)} {rnd.choice('+-*/')} {expr(depth - 1)}"

    checked = 0
    for _ in range(400):
        e = expr(5)
        text = (PAPER + "".join(f"let {k} = {v}\n" for k, v in names.items())
                + f"let d = {e}\n" + MODEL.replace("embed(src, d)", "embed(src, 8)"))
        try:
            spec = lower.lower(parser.parse_text(text, "x.attn"), "x.attn", text)
        except SpecError:
            continue  # division by zero, out of range: not this test's business
        consts, syms = dict(spec.constants), dict(spec.const_syms)
        if syms.get("d"):
            assert _eval(syms["d"], names) == pytest.approx(consts["d"]), (e, syms["d"])
            checked += 1
    assert checked > 250


# ---- out-of-range constants say what is wrong with them ---------------------------------


@pytest.mark.parametrize("value, message", [
    ("0", "`vocab` must be a positive integer, got 0"),
    ("-5", "`vocab` must be a positive integer, got -5"),
    ("1e308", "`vocab` must be a positive integer of at most 16,777,216, got 1e+308"),
    ("1e9", "`vocab` must be a positive integer of at most 16,777,216, got 1000000000"),
    ("2.5", "`vocab` must be a whole number, got 2.5"),
])
def test_a_bad_vocabulary_size_is_named_as_such(value, message):
    text = PAPER + f"let vocab = {value}\n" + MODEL.replace("vocab = 100", "vocab = vocab") \
        .replace("embed(src, d)", "embed(src, 8)")
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "x.attn")
    got = [(d.loc.line, d.loc.column, d.message) for d in info.value.diagnostics]
    assert got == [(4, 35, message)], got
