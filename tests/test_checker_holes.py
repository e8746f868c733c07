"""Two holes of `check` (issue 13) and what the language now says about them.

1. ``update`` in a model variant replaces the base's one top-level ``update`` of that
   name, in its place (docs/language.md); with none or several there it is an error
   (the error cases are in tests/test_errors.py).
2. A decoder with ``feed = ATT`` runs itself and every node between it and ATT one step
   at a time; what needs the other steps there (attention over the decoder's axis, i.e.
   attention inside a recurrence, and ops that mix its positions) is refused, while the
   position-wise models that used to work are still accepted.
"""

from __future__ import annotations

import pytest

from taxcompile import codegen, ir
from taxcompile.diagnostics import SpecError
from taxcompile.pipeline import load_text

PAPER = 'paper p {\n    cite = "T"\n}\nlet d = 8\n'

BASE = PAPER + """model a {
    input x: sequence[L, 8]
    feature h = linear(x, d)
    attention att { query = project(h)  keys = h  score = scaled_multiplicative }
    update h = norm(h + att)
    attention att2 { query = project(h)  keys = h  score = scaled_multiplicative }
    output y = classify(mean(h), 3)
}
"""


def nodes(cm) -> list[tuple[str, str, list[str]]]:
    """(id, op or kind, the node ids it reads) in the model's statement order."""
    out = []
    for n in cm.model.nodes:
        what = n.expr.fn if isinstance(n, ir.Node) and isinstance(n.expr, ir.Op) else n.kind_
        exprs = (n.expr,) if isinstance(n, ir.Node) else \
            (n.query, n.keys, n.values) if isinstance(n, ir.Attention) else ()
        reads = sorted({r for e in exprs if e is not None for r in ir.refs(e)})
        out.append((n.id, what, reads))
    return out


def test_variant_update_replaces_the_base_update_in_place():
    cs = load_text(BASE + "model b : a {\n    update h = relu(h + att)\n}\n", "t.attn")
    a, b = (nodes(cm) for cm in cs.models)
    assert [x[0] for x in a] == [x[0] for x in b] == ["x", "h", "att", "h@2", "att2", "y"]
    assert a[3] == ("h@2", "norm", ["att", "h"])
    assert b[3] == ("h@2", "relu", ["att", "h"])
    assert a[:3] + a[4:] == b[:3] + b[4:]  # everything else, readers of h@2 included
    assert b[4][2] == ["h@2"] and b[5][2] == ["h@2"]
    for cm in cs.models:
        compile(codegen.generate(cs, cm, "t.attn"), "t.py", "exec")


def test_variant_of_a_variant_replaces_again():
    text = (BASE + "model b : a {\n    update h = relu(h + att)\n}\n"
            "model c : b {\n    update h = tanh(h + att)\n}\n")
    c = nodes(load_text(text, "t.attn").models[2])
    assert c[3] == ("h@2", "tanh", ["att", "h"])


def test_variant_update_with_other_overrides():
    """The replaced update reads the variant's own version of an overridden statement."""
    text = BASE + ("model b : a {\n    feature h = linear(x, d, act = tanh)\n"
                   "    update h = relu(h + att)\n}\n")
    b = nodes(load_text(text, "t.attn").models[1])
    assert b[1] == ("h", "linear", ["x"]) and b[3] == ("h@2", "relu", ["att", "h"])


def test_variant_update_never_appends_after_the_output():
    """Before: `b`'s update went after `y`, which kept reading the base's version."""
    text = BASE.replace("    update h = norm(h + att)\n", "")
    with pytest.raises(SpecError, match="`a` has no top-level `update h`"):
        load_text(text + "model b : a {\n    update h = relu(h + att)\n}\n", "t.attn")


DECODER = """model m {{
    input src: tokens[S] (vocab = 20)
    input tgt: tokens[T] (vocab = 20, autoregressive)
    feature h = embed(src, d)
    feature e = embed(tgt, d)
    query s = gru({x}, d, feed = att)
    {extra}
    attention att {{ query = {q}  features = {k}  score = general }}
    output y = classify(concat(s, att), 20)
}}
"""

ACCEPTED = [  # position-wise along T inside the loop, or computed before it
    dict(x="e", extra="", q="s", k="h"),
    dict(x="cnn(positional(e), d)", extra="", q="s", k="h"),  # the decoder's input: before
    dict(x="e", extra="feature u = norm(s + e)", q="linear(u, d)", k="h"),
    dict(x="e", extra="attention mid { query = e  features = h  score = general }",
         q="concat(s, mid)", k="h"),  # `mid` is declared after `s` but runs before the loop
    dict(x="e", extra="update s = norm(s + linear(s, d))", q="s", k="h"),
]

REFUSED = [  # (spec, what the first error says)
    (dict(x="e", extra="", q="s", k="s"), "attention `att` attends over `T`"),  # LSTMN
    (dict(x="e", extra="", q="s", k="e"), "attention `att` attends over `T`"),
    (dict(x="e", extra="feature u = linear(s, d)", q="s", k="u"), "attends over `T`"),
    (dict(x="e", extra="attention mid { query = s  features = s  score = general  "
          "mask = causal }", q="mid", k="h"), "attention `mid` attends over `T`"),
    (dict(x="e", extra="", q="concat(s, mean(e))", k="h"), "`mean` pools over `T`"),
    (dict(x="e", extra="", q="positional(s)", k="h"), "`positional` encodes positions over"),
    (dict(x="e", extra="", q="lstm(s, d)", k="h"), "`lstm` runs over `T`"),
    (dict(x="e", extra="", q="learned(d)", k="h"), "it does not depend on `s`"),
    (dict(x="e", extra="feature u = stack(s, e)", q="learned(d)", k="u"),
     "the values of `att` are built from decoder `s`"),
]


@pytest.mark.parametrize("parts", ACCEPTED, ids=lambda p: p["q"] + "/" + p["extra"][:20])
def test_position_wise_decoder_loops_are_accepted(parts):
    cs = load_text(PAPER + DECODER.format(**parts), "t.attn")
    compile(codegen.generate(cs, cs.models[0], "t.attn"), "t.py", "exec")


@pytest.mark.parametrize("parts,says", REFUSED, ids=[s for _, s in REFUSED])
def test_what_needs_other_steps_is_refused(parts, says):
    text = PAPER + DECODER.format(**parts)
    with pytest.raises(SpecError) as info:
        load_text(text, "t.attn")
    d = info.value.diagnostics[0]
    assert says in d.message, d.message
    assert "the steps of decoder `s`" in d.message or "decoder `s`" in d.message \
        or "context" in d.message
    assert d.hint  # every refusal says what to do instead
    assert 1 <= d.loc.line <= text.count("\n") and d.loc.column >= 1
