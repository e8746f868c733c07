"""No spec name shadows a name of the generated file (issue 23, issue 27 item 3).

taxcompile/reserved.py derives the file's own names from the code templates; these tests
hold it to what the generated files actually are:

1. every model of specs/ and examples/ is generated and parsed: no function binds a name
   the file defines or imports at its top level, or a builtin; no submodule attribute hides
   an nn.Module attribute or a method of its class; no Config field hides Config's own
   names; and every top-level name of a file is one reserved.module_names() knows;
2. a spec name that is one of the file's names is refused with a located error (inputs,
   constants, axes: the model's API and Config) or renamed in the generated code
   (statements: locals and attributes), and the renamed model still works;
3. the static list of nn.Module's attributes is torch's.
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

from conftest import ROOT, error_snapshot
from taxcompile import codegen, pipeline, reserved
from taxcompile.diagnostics import SpecError

SPEC_FILES = sorted((ROOT / "specs").glob("*.attn")) + sorted((ROOT / "examples").glob("*.attn"))
BUILTINS = set(dir(builtins))


def _scope_bound(fn: ast.FunctionDef) -> set[str]:
    """The names a function binds in its own scope (parameters, assignments, for targets,
    nested defs' names; not what nested functions, lambdas or comprehensions bind)."""
    a = fn.args
    names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    stack = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                             ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return names


def problems(src: str, axes: frozenset[str] = frozenset()) -> list[str]:
    """What in a generated file binds or hides one of the file's own names. ``axes``: the
    spec's axis names, which example_inputs() binds to their lengths; it reads no other
    global than those reserved.example_names() refuses (`torch`, `Config`), so an axis `F`
    there hides nothing it uses."""
    tree = ast.parse(src)
    top: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            top |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign):
            top |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    made = {n for n in top if re.fullmatch(r"[A-Z]\w*(Attention|Layer)\d*", n)}  # classes.py,
    out = [f"top-level `{n}` unknown to reserved.module_names()"  # repeat.py: per mechanism
           for n in sorted(top - made - reserved.module_names())]
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef,
                                                             ast.AsyncFunctionDef))]
    reads = {id(f): {n.id for n in ast.walk(f) if isinstance(n, ast.Name)
                     and isinstance(n.ctx, ast.Load)} for f in functions}
    # the builtins the file calls: read somewhere as globals, or by the templates
    calls = {n for f in functions for n in reads[id(f)] - _scope_bound(f) if n in BUILTINS} \
        | reserved.builtins_used()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            clash = _scope_bound(node) & (top | calls) & reads[id(node)]  # read as the local
            if node.name == "example_inputs":
                clash = (clash - axes) | (clash & reserved.example_names())
            out += [f"{node.name}() binds `{n}`" for n in sorted(clash)]
        if isinstance(node, ast.ClassDef):
            methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
            if node.name == "Config":
                fields = {f.target.id for f in node.body if isinstance(f, ast.AnnAssign)}
                used = {d.id for f in node.body if isinstance(f, ast.FunctionDef)
                        for d in f.decorator_list if isinstance(d, ast.Name)}
                out += [f"Config field `{n}`" for n in sorted(fields & (methods | used))]
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and \
                        isinstance(sub.value, ast.Name) and sub.value.id == "self" and \
                        sub.attr in (reserved.NN_MODULE_ATTRS | methods) - {"training"}:
                    out.append(f"{node.name}: self.{sub.attr}")
    return out


MODELS = [(path, cm.model.name) for path in SPEC_FILES for cm in pipeline.load(path).models]


@pytest.mark.parametrize("path, model", MODELS, ids=[f"{p.stem}-{m}" for p, m in MODELS])
def test_no_generated_file_shadows_its_own_names(path, model):
    cs = pipeline.load(path)
    cm = next(m for m in cs.models if m.model.name == model)
    axes = frozenset(a for i in cm.model.inputs for a in i.axes)
    assert problems(codegen.generate(cs, cm, path.name), axes) == []


def test_the_check_finds_a_shadowed_helper():
    """The oracle can fail: an input called like a helper, as issue 27 found it."""
    src = "def extend_cache(c):\n    return c\n\n\ndef forward(extend_cache):\n" \
          "    return extend_cache(1)\n"
    assert problems(src) == ["top-level `forward` unknown to reserved.module_names()",
                             "forward() binds `extend_cache`"]


# ---- spec names that are the file's own --------------------------------------------------

HEADER = 'paper t { cite = "T" }\n'
BASE = HEADER + """let d = 8
model m {
    input xs: tokens[T] (vocab = 10, autoregressive)
    feature h = embed(xs, d)
    attention att { query = h  keys = h  score = scaled_multiplicative  mask = causal }
    output y = classify(att, 10)
}
"""
ROLES = {  # how a name is given each role in BASE
    "input": lambda n: BASE.replace("xs", n),
    "constant": lambda n: BASE.replace("let d", f"let {n}").replace("embed(xs, d)",
                                                                     f"embed(xs, {n})"),
    "axis": lambda n: BASE.replace("[T]", f"[{n}]"),
    "feature": lambda n: BASE.replace("feature h", f"feature {n}").replace("= h ", f"= {n} ")
    .replace("keys = h", f"keys = {n}"),
    "attention": lambda n: re.sub(r"\batt\b", n, BASE),
}
# one name of each kind the file has: helpers, classes, imports, generate()'s names,
# example_inputs()'s, Config's, nn.Module's, builtins the code calls
NAMES = ["extend_cache", "check_sizes", "EdgeSum", "torch", "bos", "step", "device", "g",
         "out", "tiny", "compile", "generate", "sum", "cfg"]


def outcome(text: str):
    """'refused' (located), or what problems() finds in the generated source."""
    try:
        cs = pipeline.load_text(text, "t.attn")
    except SpecError as e:
        d = e.diagnostics[0]
        assert d.loc is not None and d.loc.line > 0, e.render()
        return "refused"
    cm = cs.models[0]
    return problems(codegen.generate(cs, cm, "t.attn"),
                    frozenset(a for i in cm.model.inputs for a in i.axes))


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_spec_name_of_the_file_is_refused_or_renamed(role):
    for name in NAMES:
        got = outcome(ROLES[role](name))
        if role in ("input", "constant", "axis") and name in reserved.ROLES[role][0]():
            assert got == "refused", (role, name)
        if got != "refused":
            assert got == [], (role, name)


def test_the_extend_cache_input_of_issue_27():
    got, want = error_snapshot("input_named_like_a_helper")
    assert got == want


@pytest.mark.parametrize("text, name", [
    (ROLES["constant"]("tiny"), "tiny"), (ROLES["axis"]("device"), "device"),
    (ROLES["axis"]("g"), "g"), (ROLES["axis"]("out"), "out"), (ROLES["axis"]("torch"), "torch"),
])
def test_the_names_of_issue_23_are_refused(text, name):
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "t.attn")
    assert f"name `{name}` is reserved" in info.value.diagnostics[0].message


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("statement", ["attention", "repeat"])
def test_a_module_named_compile_keeps_nn_modules_compile(statement):
    """`self.compile = …` would hide nn.Module.compile: the attribute is renamed, and the
    model computes what the same model under another name computes."""
    from taxcompile.run import load_module
    if statement == "attention":
        spec = re.sub(r"\batt\b", "NAME", BASE)
    else:
        spec = BASE.replace("    attention att { query = h  keys = h  score = scaled_multiplicative"
                            "  mask = causal }\n    output y = classify(att, 10)",
                            "    repeat NAME 2 {\n        attention att { query = h  keys = h  "
                            "score = scaled_multiplicative  mask = causal }\n"
                            "        update h = h + att\n    }\n    output y = classify(h, 10)")
    mods = []
    for i, name in enumerate(("compile", "other")):
        cs = pipeline.load_text(spec.replace("NAME", name), "t.attn")
        mods.append(load_module(codegen.generate(cs, cs.models[0], "t.attn"), f"rn_{statement}_{i}"))
    torch.manual_seed(0)
    renamed = mods[0].Model(mods[0].Config()).double()
    plain = mods[1].Model(mods[1].Config()).double()
    assert isinstance(renamed.__dict__.get("compile"), type(None))  # nothing hides it
    assert type(renamed).compile is torch.nn.Module.compile
    names = [k.replace("compile_2", "other") for k in renamed.state_dict()]
    assert names == list(plain.state_dict())
    plain.load_state_dict(dict(zip(names, renamed.state_dict().values())))
    x = mods[0].example_inputs(cfg=renamed.cfg)
    torch.testing.assert_close(renamed(**x).output, plain(**x).output, rtol=0, atol=0)


def test_nn_module_attributes_are_torchs():
    nn = torch.nn
    have = {n for n in dir(nn.Module) if not n.startswith("__")} | \
        {n for n in vars(nn.Module()) if not n.startswith("__")}
    assert have <= reserved.NN_MODULE_ATTRS, sorted(have - reserved.NN_MODULE_ATTRS)


def test_reserved_names_come_from_the_templates():
    """A new helper template is reserved without a hand-written list."""
    for helper in (reserved.TEMPLATES / "helpers").glob("*.py.j2"):
        defined = set(re.findall(r"^(?:def|class) (\w+)", helper.read_text(), flags=re.M))
        assert defined and defined <= reserved.module_names(), helper.name
    assert {"Config", "Model", "Output", "example_inputs", "torch", "nn", "F"} <= \
        reserved.module_names()
    assert {"tiny", "generate", "capsule_loss"} <= reserved.class_methods()
    assert Path(reserved.__file__).read_text().count("torch") < 20  # no torch import


@pytest.mark.parametrize("first, second", [("x", "x_mask"), ("x_mask", "x")])
def test_an_input_named_like_another_inputs_padding_mask(first, second):
    """forward(x, x_mask, x_mask=None) is a SyntaxError: refused, in either order."""
    text = HEADER + f"""model m {{
    input {first}: sequence[L, 8]
    input {second}: sequence[L, 8]
    attention s {{ query = project(x)  keys = x_mask  score = scaled_multiplicative }}
    output y = s
}}
"""
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "t.attn")
    d = info.value.diagnostics[0]
    assert (d.loc.line, d.message) == (4, f"input name `{second}` is taken: `forward()` would "
                                          "have two parameters `x_mask`, input `x_mask` and the "
                                          "padding mask of input `x`")
