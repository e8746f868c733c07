"""A forward() starts with ``B = x.shape[0]`` / ``cfg = self.cfg`` when its code reads them,
a decision taken from what the code read as it was rendered (``Frame.reads``: the size
renderer records ``cfg``, ``expr.BATCH`` records ``B``), not by reading the emitted lines.

The oracle is Python's own parse of the generated file: in every class forward() the plan
wrote (the Model and each repeat's Block), over every spec of specs/ and examples/, the
names ``B`` and ``cfg`` are read exactly when they are bound first, and a Block's __init__
keeps ``self.cfg`` exactly when its forward() reads it."""

from __future__ import annotations

import ast
import tokenize
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import specgen
from taxcompile import codegen, pipeline
from taxcompile.diagnostics import SpecError
from taxcompile.codegen import expr
from taxcompile.codegen.expr import BATCH, CFG, SELF, CfgField, parse_sym
from taxcompile.codegen.frame import Frame, Owner, constructor
from taxcompile.codegen.names import Dim, dim_of

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted(p.relative_to(ROOT).as_posix() for d in ("specs", "examples")
               for p in (ROOT / d).glob("*.attn"))
BOUND = {"B": "B = <first tensor>.shape[0]", "cfg": "cfg = self.cfg"}


def _plans(spec: str, cs=None):
    cs = cs or pipeline.load(ROOT / spec)
    for cm in cs.models:
        fp = codegen.plan(cs, cm, spec)
        yield fp, codegen.emit.render(fp)


def _binding(stmt: ast.stmt) -> str | None:
    """The name a forward()'s first statements bind for the body: ``B = x.shape[0]`` or
    ``cfg = self.cfg``, else None."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)):
        return None
    name, value = stmt.targets[0].id, stmt.value
    if name == "cfg" and ast.unparse(value) == "self.cfg":
        return name
    if name == "B" and isinstance(value, ast.Subscript) and \
            ast.unparse(value).endswith(".shape[0]"):
        return name
    return None


def _check_class(cls: ast.ClassDef, block: bool) -> list[str]:
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
    fwd = methods["forward"]
    bound: dict[str, int] = {}
    for i, stmt in enumerate(fwd.body):
        name = _binding(stmt)
        if name is not None:
            assert name not in bound, f"{cls.name}: {name} bound twice"
            bound[name] = i
    read: dict[str, int] = {}  # name -> the top-level statement that first reads it
    for i, stmt in enumerate(fwd.body):
        if _binding(stmt) is not None:
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id in BOUND and \
                    isinstance(node.ctx, ast.Load):
                read.setdefault(node.id, i)
    bad = []
    for name in BOUND:
        if name in read and name not in bound:
            bad.append(f"{cls.name}.forward reads {name} but never binds it ({BOUND[name]})")
        elif name in bound and name not in read:
            bad.append(f"{cls.name}.forward binds {name} and never reads it")
        elif name in bound and bound[name] > read[name]:
            bad.append(f"{cls.name}.forward reads {name} before it binds it")
    if not block:  # (the Model keeps self.cfg for its other methods: generate(), loss())
        return bad
    keeps = any(isinstance(s, ast.Assign) and ast.unparse(s) == "self.cfg = cfg"
                for s in methods["__init__"].body)
    if keeps != ("cfg" in read):
        bad.append(f"{cls.name}.__init__ keeps self.cfg: {keeps}, forward reads cfg: "
                   f"{'cfg' in read}")
    return bad


def _check_file(spec: str, cs=None) -> list[str]:
    bad = []
    for fp, text in _plans(spec, cs):
        planned = {fp.model.name} | {b.name for b in fp.blocks}
        classes = [c for c in ast.parse(text).body
                   if isinstance(c, ast.ClassDef) and c.name in planned]
        assert len(classes) == len(planned)
        for cls in classes:
            bad += _check_class(cls, cls.name != fp.model.name)
    return bad


@pytest.mark.parametrize("spec", SPECS)
def test_every_forward_binds_b_and_cfg_exactly_when_it_reads_them(spec):
    assert not _check_file(spec)


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.data_too_large])
@given(specgen.generated_specs())
def test_generated_specs_bind_b_and_cfg_exactly_when_they_read_them(text):
    """The same over tests/specgen.py's models (nested and shared repeats, decoders, graphs,
    capsules, …): planned and written, not run."""
    try:
        cs = pipeline.load_text(text, "gen.attn")
    except SpecError:
        return
    assert not _check_file("gen.attn", cs)


def test_planning_tokenizes_no_emitted_code(monkeypatch):
    """The decision is the plan's: planning a model with repeat blocks that read B and cfg
    (and blocks that read neither) reads no line of its code back."""
    def refuse(*_a, **_k):
        raise AssertionError("planning tokenized emitted code")

    monkeypatch.setattr(tokenize, "generate_tokens", refuse)
    for spec in ("specs/wallaart2019.attn", "specs/yu2018.attn", "specs/vaswani2017.attn"):
        cs = pipeline.load(ROOT / spec)
        for cm in cs.models:
            codegen.plan(cs, cm, spec)


def test_the_renderer_records_what_forward_code_reads():
    f = Frame(Owner("Model"), set())
    with f.reading():
        assert f"{BATCH}, {dim_of(None, 'd_model').times(2)}" == "B, 2 * cfg.d_model"
    assert f.reads == {"B", "cfg"}
    g = Frame(Owner("Block"), set())
    with g.reading():
        str(Dim(16))  # a literal
        str(parse_sym("3 * 4"))  # a constant expression without a field
        CfgField("d").render(SELF)  # a Config property's, not forward()'s
        CfgField("d").render("self.cfg")  # a method of Model (generate())
        dim_of(None, "d").shown()  # a shape comment
        constructor(lambda: f"nn.Linear({CfgField('d')}, 4)")  # __init__'s cfg
        with expr.unread():
            str(CfgField("heads"))  # a check of sizes, not code
    assert g.reads == set()
    with g.reading():
        assert str(parse_sym("d_model // heads")) == "cfg.d_model // cfg.heads"
    assert g.reads == {CFG}
    str(BATCH)  # outside any frame: recorded nowhere
    assert f.reads == {"B", "cfg"} and g.reads == {CFG}


def test_a_constructor_s_sizes_are_not_forward_s_reads():
    """A block whose constructors read the Config and whose forward() does not: no
    ``cfg = self.cfg`` (wallaart2019's hop reads B only)."""
    (fp, _), = list(_plans("specs/wallaart2019.attn"))
    hop = next(b for b in fp.blocks if b.name == "HopLayer")
    assert any("cfg." in s.ctor for s in hop.submodules)
    assert not hop.keeps_cfg
    assert [s.code for s in hop.body[:1]] == ["B = q_l.shape[0]"]



def test_the_oracle_sees_a_wrong_binding():
    src = ("class Layer(nn.Module):\n"
           "    def __init__(self, cfg):\n        self.cfg = cfg\n"
           "    def forward(self, x):\n        B = x.shape[0]\n        return x.view(-1, cfg.d)\n")
    cls = ast.parse(src).body[0]
    assert _check_class(cls, True) == [
        "Layer.forward binds B and never reads it",
        "Layer.forward reads cfg but never binds it (cfg = self.cfg)"]
