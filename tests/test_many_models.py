"""A spec with thousands of models: `compile` stays linear and fast, `check` summarises.

Before the fix every model recompiled every Jinja template it used (27 s per 1,000
models); the templates are now compiled once per process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import jinja2

from taxcompile import cli, codegen, pipeline

ROOT = Path(__file__).resolve().parent.parent


def many_models(n: int) -> str:
    parts = ['paper big { cite = "Big" }', "let vocab = 100"]
    for i in range(n):
        parts.append(f"model m{i} {{\n    input src: tokens[S] (vocab = vocab)\n"
                     "    feature x = embed(src, 16)\n"
                     "    attention a { query = project(x)  keys = x  score = multiplicative }\n}")
    return "\n".join(parts) + "\n"


def test_templates_are_compiled_once_per_process(monkeypatch):
    cs = pipeline.load_text(many_models(3), "big.attn")
    codegen.generate(cs, cs.models[0], "big.attn")  # warm: whatever the first model needs
    compiled = []
    original = jinja2.Environment.compile

    def counting(self, *args, **kwargs):
        compiled.append(args[1] if len(args) > 1 else kwargs.get("name"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    for cm in cs.models[1:]:
        codegen.generate(cs, cm, "big.attn")
    assert compiled == [], f"templates compiled again for every model: {compiled}"


def test_compile_of_many_models_writes_them_all(tmp_path):
    """Linear work per model (its speed is measured by the benchmarks, not here: the
    templates-compiled-once test above is the regression check)."""
    spec = tmp_path / "big.attn"
    spec.write_text(many_models(200), encoding="utf-8")
    p = subprocess.run([sys.executable, "-m", "taxcompile", "compile", str(spec), "-o",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert len(list((tmp_path / "out").glob("*.py"))) == 200


def test_check_summarises_many_models(tmp_path, capsys):
    spec = tmp_path / "big.attn"
    spec.write_text(many_models(300), encoding="utf-8")
    assert cli.main(["check", str(spec)]) == 0
    out = capsys.readouterr().out
    assert out == f"{spec}: ok (300 models: m0, m1, m2, m3, m4, m5, m6, m7, … and 292 more)\n"


def test_check_lists_a_few_models_in_full(capsys):
    assert cli.main(["check", str(ROOT / "specs" / "luong2015.attn")]) == 0
    out = capsys.readouterr().out
    assert out.endswith(": ok (4 models: global_dot, local_m, local_p, global_location)\n")
