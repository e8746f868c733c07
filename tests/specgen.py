"""A grammar-aware spec generator and the property every spec must have (issue 23).

The property: a spec that ``check`` (``pipeline.load_text``) accepts compiles
(``codegen.generate``), imports, builds at ``Config.tiny()`` and runs forward and backward
on its own ``example_inputs`` with finite outputs, penalties and gradients, and nothing
is silently wrong where an answer can be checked against another: a position term's one
query is its full call's last row, generate() with the cache writes the tokens of greedy
full re-runs (tests/spec_oracles.py); a spec it refuses gets a located ``SpecError``
(``test_properties.assert_front_end_ok``), never another exception. ``check_spec`` is
that oracle.

Two sources of specs, hypothesis strategies both:

- ``generated_specs``: models built from the grammar's constructs and the IR's values:
  every input kind, the feature operators of ``taxcompile.ops.OPS``, attention statements
  with every score, alignment, heads / heads_out, hops, capsules, masks (structural, from
  data, graphs), position terms, biases, penalties, coverage, dropout, co-attention
  (affinity, ``share``), ``repeat`` blocks (nested, ``shared``), decoders with ``feed``,
  model variants ``model B : A`` and ``let`` constants; and tests/specgen_parts.py's
  Transformer decoders (position terms under generate(), ``tie``), supervised and doubly
  stochastic penalties, ``resize``, ``of =`` views, literal sizes beside an axis,
  many-axis inputs, capsules over a grid and long ``let`` chains. Most are valid, so that
  the run reaches codegen; some combinations are refused, and must be refused with a
  location.
- ``mutated_specs``: the real ``specs/`` and ``examples/`` with test_properties.py's
  token- and line-level mutations.

Used by tests/test_spec_property.py (a quick profile in ``make test``) and by
``make fuzz`` (the long profile: ``TAXCOMPILE_FUZZ_EXAMPLES``, default 10,000). Every
failure found is kept under tests/data/regressions/ (one ``.attn`` each, with a comment
saying what failed), and the test runs each through ``check_spec``. ``KNOWN_DEFECTS``
lists the defects found and not fixed yet.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import strategies as st

from taxcompile.diagnostics import SpecError
from taxcompile.mechanism_names import spelled
from taxcompile.ops import ACTIVATIONS
from taxcompile.pipeline import load_text

import spec_oracles
from specgen_parts import NEW_PARTS, POSITION_TERMS, add_lm, let_chain
from test_properties import MUTATIONS, assert_front_end_ok

ROOT = Path(__file__).resolve().parent.parent
REGRESSIONS = Path(__file__).resolve().parent / "data" / "regressions"

# ---------------------------------------------------------------------------------------
# The oracle
# ---------------------------------------------------------------------------------------


# Defects the generator or an oracle finds on main that other branches fix: flag -> the
# defect. A flag is a part of generated_specs() not drawn (its ``avoid``) or an oracle of
# check_spec() not run (its ``skip``); tests/test_spec_property.py passes these in both
# profiles. Remove a flag once its fix is merged: `make fuzz` must pass with none left.
KNOWN_DEFECTS: dict[str, str] = {}


def check_spec(text: str, file: str = "gen.attn", skip=frozenset()) -> str:
    """``"refused"`` (a located SpecError), or ``"ran"`` (every model compiled, imported,
    built at ``Config.tiny()`` and ran forward and backward with finite values, and
    passed the oracles of tests/spec_oracles.py not in ``skip``: ``position_rows`` and
    ``decoding``). Raises AssertionError (or the unexpected exception) otherwise."""
    try:
        cs = load_text(text, file)
    except SpecError:
        return assert_front_end_ok(text, file) and "refused"
    for cm in cs.models:
        mod, src = spec_oracles.run_model(cs, cm, file)
        if "position_rows" not in skip:
            spec_oracles.position_rows(cs, cm, file)
        if "decoding" not in skip:
            spec_oracles.decoding(mod, src, f"model `{cm.model.name}`")
    return "ran"


# ---------------------------------------------------------------------------------------
# Generated specs: the pieces
# ---------------------------------------------------------------------------------------

SAME_WIDTH_ACTS = [a for a in ACTIVATIONS if a != "maxout"]
ACT_TEXT = {"elu": ["elu", "elu(0.5)"], "leaky_relu": ["leaky_relu", "leaky_relu(0.2)"],
            "scaled_tanh": ["scaled_tanh(2)", "scaled_tanh(c = 5)"]}


def act_text(draw, acts=SAME_WIDTH_ACTS) -> str:
    a = draw(st.sampled_from(acts))
    return draw(st.sampled_from(ACT_TEXT.get(a, [a])))


# Feature operators that keep the width d and the axes: `{}` is the operand.
WRAPS = ["norm({})", "relu({})", "tanh({})", "sigmoid({})", "gelu({})", "softplus({})",
         "elu({})", "leaky_relu({}, 0.1)", "scaled_tanh({}, 3)", "identity({})", "scale({})",
         "dropout({}, p)", "positional({})", "positional({}, kind = learned)",
         "ffn({}, 16, act = {act})", "cnn({}, d, kernel = 3, act = {act})", "cnn({}, d, 2)",
         "lstm({}, d)", "gru({}, d, layers = 2, dropout = 0.1)", "bilstm({}, d / 2)",
         "bigru({}, half)", "linear({}, d, act = {act})", "linear({}, d, bias = false)",
         "linear({}, 2 * d, act = maxout(2))", "project({})", "project({}, d)",
         "{} + linear({}, d)", "{} * sigmoid(linear({}, 1))", "{} - tanh({})",
         "1 - sigmoid({})", "maxout(linear({}, 2 * d), 2)", "linear(concat({}, {}), d)",
         # issue 25: split, grouped and separable convolutions, a vector tiled over positions
         "split(linear({}, 2 * d), 2, 1)", "cnn({}, d, groups = 2)",
         "cnn({}, d, kernel = 5, separable = true, act = {act})", "cnn({}, d, bias = false)",
         "{} * mean({})", "{} + learned(d)", "mean({}) - {}"]


def wrap(draw, x: str, depth: int = 2) -> str:
    for _ in range(draw(st.integers(0, depth))):
        w = draw(st.sampled_from(WRAPS))
        if "{act}" in w:
            w = w.replace("{act}", act_text(draw))
        x = w.replace("{}", x) if w.count("{}") > 1 else w.format(x)
    return x


class Model:
    """A model under construction: statement lines, and the names by their shape."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.seqs: list[tuple[str, str]] = []  # (feature name, axis): (axis, d)
        self.vectors: list[str] = []  # (d) features
        self.atts: list[str] = []  # attention statements read as features
        self.outputs: list[str] = []
        self.fixed: list[str] = []  # features over an axis of fixed length
        self.avoid: frozenset = frozenset()  # KNOWN_DEFECTS flags not to draw
        self.n = 0

    def new(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


def add_input(draw, m: Model) -> None:
    kind = draw(st.sampled_from(["tokens", "sequence", "sequence", "set", "grid", "vector",
                                 "nested", "tokens_fixed"]))
    x, ax = m.new("x"), m.new("L").upper()
    if kind == "tokens":
        m.lines.append(f"input {x}: tokens[{ax}] (vocab = 20)")
        base = f"embed({x}, d{draw(st.sampled_from(['', ', scale = true']))})"
    elif kind == "tokens_fixed":
        m.lines.append(f"input {x}: tokens[{ax}] (vocab = 20, {ax} = 6)")
        base = f"embed({x}, d)"
    elif kind == "sequence":
        fixed = draw(st.sampled_from(["", f" ({ax} = 5)"]))
        m.lines.append(f"input {x}: sequence[{ax}, 6]{fixed}")
        base = draw(st.sampled_from([f"linear({x}, d)", f"project({x}, d)",
                                     f"linear({x}, d, act = tanh)"]))
    elif kind == "set":
        m.lines.append(f"input {x}: set[{ax}, 5]")
        base = f"project({x}, d)"
    elif kind == "grid":
        m.lines.append(f"input {x}: grid[H{m.n}, W{m.n}, 3] (H{m.n} = 4, W{m.n} = 4)")
        base = draw(st.sampled_from([f"flatten(conv2d({x}, d))",
                                     f"flatten(upsample(maxpool(conv2d({x}, d), 2), 2))",
                                     f"flatten(conv2d({x}, d, stride = 2))"]))
        ax = None
    elif kind == "vector":
        m.lines.append(f"input {x}: vector[6]")
        m.vectors.append(f"linear({x}, d)")
        return
    else:  # a hierarchy: W words in each of S sentences (Fig. 8)
        sent = f"S{m.n}"
        m.lines.append(f"input {x}: tokens[{sent}, {ax}] (vocab = 20)")
        f = m.new("w")
        m.lines.append(f"feature {f} = {wrap(draw, f'embed({x}, d)', 1)}")
        words = m.new("aw")
        m.lines.append(f"attention {words} {{ query = learned(d)  features = {f}  "
                       f"score = {draw(st.sampled_from(['additive', 'general']))} }}")
        m.seqs.append((words, sent))
        return
    f = m.new("h")
    m.lines.append(f"feature {f} = {wrap(draw, base)}")
    m.seqs.append((f, ax))
    if kind == "tokens_fixed" or kind == "sequence" and fixed:
        m.fixed.append(f)


# The scores, alignments, biases, masks and ways of joining heads of the mechanism registry,
# each written as below where it has parameters worth drawing (else its shortest call and
# its aliases: a new record is drawn without an edit here).
SCORES = spelled("score", {
    "additive": ["additive", "additive(d_w = 8, act = {act})", "additive(d_w = 4, bias = false)"],
    "concat": ["concat(d_w = 8)"],
    "activated_general": ["activated_general", "activated_general(act = {act})"],
    "similarity": ["similarity(kind = cosine)", "similarity(kind = l2)"],
}, skip=("affinity", "max_pool", "activated_concat"))  # add_coattention's, add_graph's
ALIGNS = spelled("align", {
    "crf": ["crf", "crf(normalize = true)"], "lsh": ["lsh(buckets = 2, rounds = 2, chunk = 2)"],
    "local": ["local(D = 2, position = monotonic)", "local(D = 1, position = predictive)",
              "local(D = 2, position = predictive, gaussian = true, sigma = 1)"]})
BIASES = spelled("bias", {})
MASKS = spelled("mask", {})
HEADS_OUTS = spelled("heads_out", {"routing": ["routing(capsules = 2, iters = 2)"]})


def rarely(draw, n: int = 6) -> bool:
    """True about once in ``n``: a choice that mostly makes an invalid combination."""
    return draw(st.integers(0, n - 1)) == 0


ADDITIVE = ["additive", "additive(d_w = 8, act = {act})", "additive(d_w = 4, bias = false)"]
QK = ["multiplicative", "scaled_multiplicative"]
# A module's mechanisms besides its score: up to three per module, each drawn with what it
# needs (the documented rules), and now and then without it, for check to refuse.
MECHANISMS = ["heads", "heads_out", "multi", "capsules", "mask", "position", "bias",
              "lin_penalty", "doubly_stochastic", "coverage_loss", "disagreement",
              "supervised", "coverage", "dropout", "share", "talking_heads",
              "mem_kv", "head_gates", "kv_heads", "qk_norm", "mem_len"]


def attention(draw, m: Model, name: str, keys: str, key_axis: str | None,
              query: str | None, *, same_axis: bool, seq_query: bool = False) -> str:
    """One attention statement over ``keys``. ``same_axis``: the query is a sequence over
    the keys' own axis (self-attention: masks, position terms and biases apply);
    ``seq_query``: a query sequence over another axis (a decoder's states)."""
    mechs = draw(st.lists(st.sampled_from(MECHANISMS), max_size=3, unique=True))
    if rarely(draw, 2):
        mechs.append("align")
    keep = not rarely(draw, 8)  # False: the rules are not followed for this module
    if seq_query and keep:  # a decoder's module: its query stays the decoder's states
        mechs = [x for x in mechs if x not in ("mask", "position", "bias", "supervised",
                                               "capsules", "heads_out", "mem_len")]
    f: dict[str, str] = {}
    seq = same_axis or seq_query
    needs_seq = {"doubly_stochastic", "coverage_loss", "coverage", "supervised"}
    if keep and not seq and needs_seq & set(mechs):
        query, seq, same_axis = keys, True, True
    if keep and not same_axis and {"mask", "position", "bias", "supervised",
                                   "mem_len"} & set(mechs):
        query, seq, same_axis = keys, True, True
    if keep and "capsules" in mechs:
        query, seq, same_axis = "learned(d)", False, False
        mechs = [x for x in mechs if x not in needs_seq | {"mask", "position", "bias",
                                                           "mem_len"}]
    if keep and query is None:  # grouped heads and qk-norm meet a query's heads
        mechs = [x for x in mechs if x not in ("kv_heads", "qk_norm")]
    if keep and {"kv_heads", "qk_norm"} & set(mechs):
        mechs = [x for x in mechs if x not in ("multi", "coverage")]
    if query is not None:
        f["query"] = query
    if draw(st.booleans()) or "share" in mechs:
        f["features"] = keys
    else:
        f["keys"] = draw(st.sampled_from([keys, f"project({keys})", f"linear({keys}, d)"]))
        f["values"] = draw(st.sampled_from([keys, f"project({keys})", f"norm({keys})"]))
    if query is None and keep:
        score = draw(st.sampled_from(ADDITIVE + ["concat(d_w = 8)"]))
    else:
        score = draw(st.sampled_from(SCORES))
        if keep and score.startswith("concat"):
            score = "additive"
    if "align" in mechs:
        f["align"] = draw(st.sampled_from(ALIGNS))
        if keep and f["align"].startswith("local") and query is None:
            f["align"] = "entmax"
        if keep and "monotonic" in f["align"] and not same_axis:
            f["align"] = "local(D = 1, position = predictive)"
    heads = "heads" in mechs or "heads_out" in mechs or (
        keep and {"lin_penalty", "disagreement", "talking_heads", "kv_heads"} & set(mechs))
    if heads:
        f["heads"] = draw(st.sampled_from(["2", "4", "h"]))
    if "kv_heads" in mechs:  # as many as the query heads (keys of any width), or a misfit
        f["kv_heads"] = f.get("heads", "2") if keep else draw(st.sampled_from(["1", "3"]))
    if "qk_norm" in mechs:
        f["qk_norm"] = draw(st.sampled_from(["true", "l2(scale = 4)", "l2(dim_scale = true)"]))
    if "heads_out" in mechs:
        f["heads_out"] = draw(st.sampled_from(HEADS_OUTS))
        if keep and "capsules" in mechs and f["heads_out"].startswith("routing"):
            f["heads_out"] = "project"  # capsule-based attention's classes are not routed
    if "multi" in mechs:
        f["dimensionality"] = "multi"
    if "capsules" in mechs:
        f["capsules"] = draw(st.sampled_from(["2", "3"]))
    if "mask" in mechs:
        f["mask"] = draw(st.sampled_from(MASKS))
    if "position" in mechs:
        f["position"] = draw(st.sampled_from(POSITION_TERMS))
    if "bias" in mechs:
        f["bias"] = draw(st.sampled_from(BIASES))
    if "lin_penalty" in mechs:
        f["penalty"] = draw(st.sampled_from(["1.0", "0.5"]))
    elif "doubly_stochastic" in mechs:
        f["penalty"] = draw(st.sampled_from(["doubly_stochastic(0.1)", "doubly_stochastic(1)"]))
    elif "coverage_loss" in mechs:
        f["penalty"] = "coverage(1.0)"
    elif "disagreement" in mechs:
        on = draw(st.sampled_from(["subspace", "position", "output"]))
        f["penalty"] = f"disagreement(0.1, on = {on})"
    elif "supervised" in mechs and key_axis is not None and \
            "input gold" not in "\n".join(m.lines):
        q_axis = key_axis if keep else "Q"  # its axes are the query's and the keys'
        m.lines.append(f"input gold: alignment[{q_axis}, {key_axis}]")
        f["penalty"] = draw(st.sampled_from(["supervised(gold, 1.0)",
                                             "supervised(gold, 0.5, loss = squared)"]))
    if "coverage" in mechs:
        f["coverage"] = "true"
    if "dropout" in mechs:
        f["dropout"] = draw(st.sampled_from(["0.1", "p"]))
    if "talking_heads" in mechs:
        f["talking_heads"] = draw(st.sampled_from(["true", "pre", "post"]))
        if keep:  # single-dimensional, without coverage's loop over queries
            f.pop("dimensionality", None)
            f.pop("coverage", None)
    if "mem_kv" in mechs and (query is not None or not keep):
        f["mem_kv"] = draw(st.sampled_from(["1", "2"]))
    if "head_gates" in mechs and (query is not None and "capsules" not in f or not keep):
        f["head_gates"] = "true"
        if keep and f.get("align") == "sigmoid":
            f["align"] = "global"
    if "mem_len" in mechs:
        f["mem_len"] = draw(st.sampled_from(["2", "4"]))
    if "share" in mechs and m.atts:
        f["share"] = draw(st.sampled_from(m.atts))
    if keep:  # what the chosen mechanisms need of the score and the alignment
        if {"multi", "coverage"} & set(mechs) or f.get("align") == "sigmoid":
            score = draw(st.sampled_from(ADDITIVE))
        if {"position", "kv_heads", "qk_norm"} & set(mechs):
            score = draw(st.sampled_from(QK))
        if {"kv_heads", "qk_norm"} & set(mechs) and f.get("align") == "sigmoid":
            f["align"] = "global"
        if {"position", "bias", "coverage"} & set(mechs) and f.get("align") not in \
                (None, "global", "soft", "sparsemax", "entmax", "topk(k = 2)"):
            f["align"] = "global"
        if "multi" in mechs and f.get("align") == "hard":
            f["align"] = "global"
        if "multi" in mechs:  # every penalty reads one weight per key
            f.pop("penalty", None)
        if "mem_kv" in f:  # a dot-product score, no position term, bias, coverage or share
            score = draw(st.sampled_from(QK))
            for x in ("position", "bias", "dimensionality", "coverage", "share"):
                f.pop(x, None)
            if f.get("penalty", "").startswith("coverage"):
                f.pop("penalty")
        if "mem_len" in f:  # the queries after the memory: every position term here counts it
            for x in ("coverage", "capsules"):
                f.pop(x, None)
            if f.get("align", "").startswith(("local", "sigmoid")):
                f["align"] = "global"
        if score == "location" and key_axis is None:
            score = "general"
    items = [(k, f[k]) for k in ("query", "features", "keys", "values")
             if k in f] + [("score", score.replace("{act}", act_text(draw)))]
    items += [(k, v) for k, v in f.items() if k not in ("query", "features", "keys", "values")]
    return f"attention {name} {{ " + "  ".join(f"{k} = {v}" for k, v in items) + " }"


def add_attention(draw, m: Model) -> None:
    name = m.new("att")
    if not m.seqs:
        add_input(draw, m)
        if not m.seqs:
            m.lines.append("input xs: sequence[LS, 6]")
            m.lines.append("feature hs = linear(xs, d)")
            m.seqs.append(("hs", "LS"))
    keys, axis = draw(st.sampled_from(m.seqs))
    other = [f for f, _ in m.seqs] + m.vectors + m.atts
    q = draw(st.sampled_from(["none", "learned", "self", "self", "mean", "other", "project"]))
    query = {"none": None, "learned": "learned(d)", "self": keys, "mean": f"mean({keys})",
             "project": f"project({keys})",
             "other": draw(st.sampled_from(other)) if other else keys}[q]
    same = query in (keys, f"project({keys})")
    text = attention(draw, m, name, keys, axis, query, same_axis=same)
    m.lines.append(text)
    m.atts.append(name)
    if rarely(draw, 8):  # a second module with the first one's weights (`share`, QANet)
        twin = m.new("tw")
        body = re.sub(r"\s+share = \w+", "", text[text.index("{"):])
        m.lines.append(f"attention {twin} {body[:-1].rstrip()}  share = {name} }}")
        m.atts.append(twin)


def add_repeat(draw, m: Model) -> None:
    """A stream refined hop by hop (eq. 41-42), a stack (a Transformer layer), or nested."""
    if not m.seqs:
        add_input(draw, m)
    if not m.seqs:
        return
    keys, axis = draw(st.sampled_from(m.seqs))
    r = m.new("r")
    count = draw(st.sampled_from(["2", "3", "hops"]))
    shared = draw(st.sampled_from(["", "", " shared"]))
    kind = draw(st.sampled_from(["query", "stack", "nested", "learned"]))
    score = draw(st.sampled_from(["general", "multiplicative", "additive",
                                  "scaled_multiplicative"]))
    body: list[str]
    if kind == "query":  # the query stream re-reads the same keys (Multi-Hop)
        q = m.new("q")
        m.lines.append(f"feature {q} = {draw(st.sampled_from(['learned(d)', f'mean({keys})']))}")
        body = [f"attention a {{ query = {q}  features = {keys}  score = {score} }}",
                f"update {q} = {draw(st.sampled_from([f'{q} + a', f'norm({q} + a)']))}"]
        out = f"{q}"
    elif kind == "learned":  # the issue's learned query inside the body
        body = ["feature q = learned(d)",
                f"attention a {{ query = q  features = {keys}  score = {score} }}",
                "update q = q + a"]
        out = f"{r}.a"
    elif kind == "stack":  # self-attention that re-encodes its keys (a Transformer layer)
        s = m.new("s")
        m.lines.append(f"feature {s} = identity({keys})")
        heads = draw(st.sampled_from(["", "  heads = 2"]))
        mask = draw(st.sampled_from(["", "  mask = causal"]))
        body = [f"attention a {{ query = {s}  features = {s}  score = {score}{heads}{mask} }}",
                f"update {s} = norm({s} + a)", f"update {s} = norm({s} + ffn({s}, 16))"]
        out = f"mean({s})"
    else:  # nested repeats, the innermost attention read from outside (`r.inner.a`)
        body = [f"repeat inner {draw(st.sampled_from(['2', '3']))} {{",
                f"    attention a {{ query = learned(d)  features = {keys}  score = {score} }}",
                "}"]
        out = draw(st.sampled_from([f"{r}.inner.a", f"{r}[1].inner[1].a", f"{r}.inner[2].a"]))
    m.lines.append(f"repeat {r} {count}{shared} {{")
    m.lines += ["    " + b for b in body]
    m.lines.append("}")
    m.outputs.append(out)


def add_decoder(draw, m: Model) -> None:
    """A recurrent decoder fed its attention (Bahdanau, Luong): the model's one target."""
    keys, axis = draw(st.sampled_from(m.seqs)) if m.seqs else ("", None)
    if not keys:
        return
    rnn = draw(st.sampled_from(["gru", "lstm"]))
    m.lines.append("input tgt: tokens[T] (vocab = 20, autoregressive)")
    init = draw(st.sampled_from(["", ", init = s0"]))
    if init:
        s0 = draw(st.sampled_from([f"mean({keys})", f"first(backward(bigru({keys}, d)))",
                                   f"first({keys})"]))
        m.lines.append(f"feature s0 = linear({s0}, d, act = tanh)")
        if rnn == "lstm":
            init += draw(st.sampled_from(["", ", init_c = s0"]))
    m.lines.append("feature emb = embed(tgt, d)")
    m.lines.append(f"query s = {rnn}(emb, d, feed = {draw(st.sampled_from(['ctx', 'hh']))}"
                   f"{init})")
    q = draw(st.sampled_from(["s", "prev(s)"]))
    m.lines.append(attention(draw, m, "ctx", keys, axis, q, same_axis=False, seq_query=True))
    m.lines.append("feature hh = linear(concat(ctx, s), d, act = tanh)")
    m.outputs.append(draw(st.sampled_from(["hh", "hh", "tie"])))


def add_coattention(draw, m: Model) -> None:
    """Parallel co-attention through an affinity matrix (eq. 12-16)."""
    while len(m.seqs) < 2:
        add_input(draw, m)
        if len(m.seqs) < 2 and draw(st.booleans()):
            return
    a, b = m.seqs[0][0], m.seqs[1][0]
    form = draw(st.sampled_from(["bilinear", "trilinear", "dot", "scaled_dot"]))
    act = draw(st.sampled_from(["", ", act = tanh"]))
    c = m.new("C")
    m.lines.append(f"affinity {c} = affinity({a}, {b}, form = {form}{act})")
    score = draw(st.sampled_from(["additive", "max_pool", "affinity"]))
    extra = draw(st.sampled_from(["", "  heads = 2", "  dimensionality = multi"])) \
        if score == "additive" or rarely(draw) else ""
    n1, n2 = m.new("co"), m.new("co")
    m.lines.append(f"attention {n1} {{ query = {b}  keys = {a}  affinity = {c}  "
                   f"score = {score}{extra} }}")
    m.lines.append(f"attention {n2} {{ query = {a}  keys = {b}  affinity = {c}  "
                   f"score = {score}{extra} }}")
    m.outputs += [f"mean({n1})", f"mean({n2})"] if score == "affinity" else [n1, n2]


def add_graph(draw, m: Model) -> None:
    """Graph attention (GAT) over a set's nodes."""
    x, g = m.new("nodes"), m.new("adj")
    m.lines.append(f"input {x}: set[N{m.n}, 5]")
    m.lines.append(f"input {g}: graph[N{m.n}]")
    wh = m.new("wh")
    m.lines.append(f"feature {wh} = project({x}, d)")
    heads = draw(st.sampled_from(["", "  heads = 2  heads_out = mean",
                                  "  heads = 2  heads_out = concat  dropout = 0.1"]
                                 + (["  heads = 2"] if rarely(draw) else [])))
    loops = draw(st.sampled_from(["", "  self_loops = true"]))
    act = draw(st.sampled_from(["", "(act = leaky_relu(0.2))", "(act = tanh)"]))
    name = m.new("gat")
    m.lines.append(f"attention {name} {{ query = {wh}  features = {wh}  "
                   f"score = activated_concat{act}  mask = {g}{heads}{loops} }}")
    m.outputs.append(f"mean({name})")


def add_mask_input(draw, m: Model) -> None:
    """A self-attention module that reads a mask input (B, L, L)."""
    if not m.seqs:
        return
    keys, axis = draw(st.sampled_from(m.seqs))
    if axis is None:
        return
    mk = m.new("mk")
    m.lines.append(f"input {mk}: mask[{axis}, {axis}]")
    mask = draw(st.sampled_from([mk, f"causal * {mk}"]))
    name = m.new("ma")
    m.lines.append(f"attention {name} {{ query = {keys}  features = {keys}  "
                   f"score = scaled_multiplicative  mask = {mask} }}")
    m.outputs.append(f"mean({name})")


def add_weights(draw, m: Model) -> None:
    """`att.weights` as a value: an output, or `context(V, A)`."""
    if not m.fixed and not (m.seqs and rarely(draw)):
        return
    keys = draw(st.sampled_from(m.fixed or [f for f, _ in m.seqs]))
    name = m.new("wa")
    m.lines.append(f"attention {name} {{ query = learned(d)  features = {keys}  "
                   f"score = {draw(st.sampled_from(['additive', 'general']))} }}")
    m.outputs.append(draw(st.sampled_from([f"{name}.weights", f"context({keys}, {name}.weights)",
                                           f"{keys} * {name}.weights",  # each position scaled
                                           f"dropout({name}.weights, p) * {keys}"])))


def add_representations(draw, m: Model) -> None:
    """Attention over a `stack` of representations of one input (eq. 21-22)."""
    if not m.seqs:
        return
    f, _ = draw(st.sampled_from(m.seqs))
    name = m.new("mr")
    other = draw(st.sampled_from([f"norm({f})", f"linear({f}, d)", f"cnn({f}, d)"]))
    m.lines.append(f"attention {name} {{ query = learned(d)  features = stack({f}, {other})  "
                   f"score = {draw(st.sampled_from(['additive', 'general', 'multiplicative']))}"
                   f" }}")
    m.outputs.append(name)


def add_pointer(draw, m: Model) -> None:
    """A pointer network (Vinyals et al.): a decoder over the pointed inputs, started from
    the encoder's final state; its output is the attention's weights."""
    x, c = m.new("pts"), m.new("C")
    ax = f"P{m.n}"
    m.lines.append(f"input {x}: sequence[{ax}, 2] ({ax} = 5)")
    m.lines.append(f"input {c}: pointers[T{m.n}] (into = {ax})")
    rnn = draw(st.sampled_from(["lstm", "gru"]))
    e, dd, ptr = m.new("enc"), m.new("dec"), m.new("ptr")
    m.lines.append(f"feature {e} = {rnn}({x}, d)")
    m.lines.append(f"query {dd} = {rnn}(pointed({x}, {c}), d, init = {e})")
    m.lines.append(f"attention {ptr} {{ query = {dd}  keys = {e}  "
                   f"score = additive(d_w = 8, bias = false) }}")
    m.outputs.append(f"{ptr}.weights")


def add_shared_ops(draw, m: Model) -> None:
    """`share = NODE` of an operator's weights, and pools as queries."""
    if not m.seqs:
        return
    f, ax = draw(st.sampled_from(m.seqs))
    a, b = m.new("sa"), m.new("sb")
    op = draw(st.sampled_from(["linear({}, d{})", "norm({}{})", "project({}, d{})",
                               "ffn({}, 16{})", "cnn({}, d{})", "scale({}{})"]))
    m.lines.append(f"feature {a} = {op.format(f, '')}")
    m.lines.append(f"feature {b} = {op.format(f, f', share = {a}')}")
    name = m.new("ps")
    pool = draw(st.sampled_from(["mean", "max", "sum", "first"]))
    m.lines.append(f"attention {name} {{ query = {pool}({a})  features = {b}  "
                   f"score = {draw(st.sampled_from(['general', 'additive', 'biased_general']))}"
                   f" }}")
    m.seqs.append((b, ax))
    m.atts.append(name)


PARTS = [add_input, add_attention, add_attention, add_attention, add_repeat, add_coattention,
         add_graph, add_mask_input, add_weights, add_representations, add_pointer,
         add_shared_ops]


@st.composite
def generated_specs(draw, avoid: frozenset = frozenset()) -> str:
    """One paper with a model and sometimes a variant of it; ``avoid``: flags of
    ``KNOWN_DEFECTS`` whose constructs are not drawn."""
    m = Model()
    m.avoid = avoid
    add_input(draw, m)
    for _ in range(draw(st.integers(1, 4))):
        draw(st.sampled_from(PARTS + NEW_PARTS))(draw, m)
    if not m.atts and not any(x.startswith(("attention", "repeat")) for x in m.lines):
        add_attention(draw, m)
    # a mask input is refused beside an autoregressive input (generate() uses a KV cache)
    decoder = rarely(draw, 3) and (" mask[" not in "\n".join(m.lines) or rarely(draw))
    if decoder:
        draw(st.sampled_from([add_decoder, add_lm, add_lm]))(draw, m)
    chain = let_chain(draw) if rarely(draw, 8) else []
    d = f"{chain[-1].split()[1]} * 4" if chain else "8"  # (every constant of the chain is 2)
    lets = [f"let d = {d}", "let h = 2", "let half = d / 2", "let p = 0.1", "let hops = 2"]
    body = [f"    let k = {draw(st.sampled_from(['3', 'd / 2', '2 * h - 1']))}"] \
        if draw(st.integers(0, 4)) == 0 else []
    body += ["    " + x for x in m.lines]
    reads = m.outputs + [a for a in m.atts if a not in " ".join(m.outputs)]
    if not reads:
        reads = [f"mean({m.seqs[0][0]})"] if m.seqs else ["learned(d)"]
    classes = "20" if decoder else "k" if body and "let k" in body[0] else "3"
    for i, r in enumerate(reads):
        if r == "tie":  # the output layer's weight is the target embedding
            body.append(f"    output o{i} = classify(hh, 20, tie = emb)")
        elif r.endswith(".weights") or r.startswith(("classify(", "context(")):
            body.append(f"    output o{i} = {r}")
        else:
            body.append(f"    output o{i} = classify({r}, {classes})")
    text = ('paper gen {\n    cite = "Generated"\n}\n\n' + "\n".join(chain + lets)
            + "\n\nmodel m {\n" + "\n".join(body) + "\n}\n")
    updates = [x.split()[1] for x in m.lines if x.startswith("update ")]
    updates = [u for u in updates if updates.count(u) == 1]  # one to replace
    if updates and rarely(draw, 3):  # a variant replacing the model's update of a stream
        u = draw(st.sampled_from(updates))
        text += f"\nmodel u : m {{\n    update {u} = relu({u})\n}}\n"
    if m.atts and draw(st.integers(0, 3)) == 0:  # a variant replacing one module
        a = draw(st.sampled_from(m.atts))
        keys = m.seqs[0][0] if m.seqs else "x1"
        text += (f"\nmodel v : m {{\n    attention {a} {{ query = learned(d)  features = {keys}"
                 f"  score = {draw(st.sampled_from(['general', 'additive']))} }}\n}}\n")
    return text


# What a generated spec holds, for hypothesis' statistics (`make fuzz` prints them) and
# tests/test_spec_property.py's check that the generator reaches each construct.
CONSTRUCTS = {
    "decoder": r"autoregressive\)", "position term": r"position = (?!transformer_xl)",
    "transformer_xl": r"position = transformer_xl", "alibi": r"bias = alibi",
    "generate() with a position term": r"(?s)autoregressive.*(position|bias) = ",
    "supervised": r"penalty = supervised\(", "doubly_stochastic": r"penalty = doubly_stochastic",
    "tie": r"tie = ", "resize": r"resize\(", "of = view": r"\bof = ",
    "literal size beside an axis": r"input xn\d+: ",
    "many-axis input": r"\[A\d+x0, A\d+x1, A\d+x2", "let chain of 300+": r"let lc299 ",
    "capsules over a grid": r"cg\d+ \{.*capsules", "repeat": r"\brepeat ",
}


def constructs(text: str) -> list[str]:
    return [name for name, rx in CONSTRUCTS.items() if re.search(rx, text)]


# ---------------------------------------------------------------------------------------
# Mutated real specs
# ---------------------------------------------------------------------------------------


def seed_texts() -> list[tuple[str, str]]:
    paths = sorted((ROOT / "specs").glob("*.attn")) + sorted((ROOT / "examples").glob("*.attn"))
    return [(p.name, p.read_text(encoding="utf-8")) for p in paths]


SEEDS = seed_texts()
TOKEN_OPS = ("replace_identifier", "replace_keyword", "replace_number", "duplicate_line",
             "delete_line", "swap_lines")


@st.composite
def mutated_specs(draw) -> str:
    _, text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 3))):
        text = MUTATIONS[draw(st.sampled_from(TOKEN_OPS))](draw, text)
    return text


@st.composite
def mutated_generated(draw, avoid: frozenset = frozenset()) -> str:
    text = draw(generated_specs(avoid=avoid))
    for _ in range(draw(st.integers(1, 2))):
        text = MUTATIONS[draw(st.sampled_from(TOKEN_OPS))](draw, text)
    return text


def any_spec() -> st.SearchStrategy[str]:
    """The whole space, generated specs drawn most often."""
    return st.one_of(generated_specs(), generated_specs(), mutated_specs(),
                     mutated_generated())
