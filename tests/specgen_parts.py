"""More of tests/specgen.py's model parts: the constructs its first parts rarely or never
wrote (issue "Nothing silently wrong", guarding it).

- ``add_lm``: a Transformer decoder over an ``autoregressive`` target (a causal
  self-attention with a position term or ALiBi, a cross-attention to the source, a
  ``repeat``, ``classify(…, tie = emb)``): generate() with position terms, ``tie``;
- ``add_penalised``: supervised attention (an ``alignment`` input) and Xu et al.'s doubly
  stochastic penalty, with what each needs;
- ``add_resize``, ``add_view`` (``of =``), ``add_literal_size`` (``learned(5)`` beside
  ``(N = 5)``), ``add_many_axes`` and ``add_capsules_grid``;
- ``let_chain``: a long chain of ``let`` constants, each defined from the one before.

Each part writes into specgen's ``Model`` (lines, seqs, outputs). A part that appends
an output ``classify(…)`` or ``context(…)`` writes it whole (specgen keeps it as
written). A known defect not fixed yet (``specgen.KNOWN_DEFECTS``) may keep a part's
draws out: the part reads its flag in ``m.avoid`` and lists it in ``AVOIDABLE``."""

from __future__ import annotations

from hypothesis import strategies as st

from taxcompile.mechanism_names import spelled

# The registry's position terms (a new record is drawn without an edit here).
POSITION_TERMS = spelled("position", {
    "relative": ["relative(k = 2)", "relative(k = 3, values = true)"],
    "rotary": ["rotary", "rotary(base = 100)"]})


def add_lm(draw, m) -> None:
    """A decoder over the target ``tgt`` (the model's one autoregressive input): causal
    self-attention with a position term (or ALiBi, or none), a cross-attention to a source
    sequence when there is one, in a ``repeat`` or not; its output the next-token logits,
    sometimes through the target embedding (``tie``)."""
    m.lines.append("input tgt: tokens[T] (vocab = 20, autoregressive)")
    m.lines.append(f"feature emb = embed(tgt, d{draw(st.sampled_from(['', ', scale = true']))})")
    pos = draw(st.sampled_from(["", "positional(emb)", "positional(emb, kind = learned)"]))
    m.lines.append(f"feature y = {pos or 'identity(emb)'}")
    term = draw(st.sampled_from(POSITION_TERMS + ["transformer_xl"] * 2 + ["alibi", "alibi", ""]))
    term = "" if pos and term and draw(st.booleans()) else term
    extra = {"alibi": "  bias = alibi", "": ""}.get(term, f"  position = {term}")
    heads = draw(st.sampled_from(["", "  heads = 2", "  heads = h"]))
    if term == "alibi" and not heads:
        heads = "  heads = 2"  # ALiBi's slopes are per head
    qkv = draw(st.sampled_from(["query = project(y)  keys = project(y)  values = project(y)",
                                "query = y  features = y", "query = project(y)  features = y"]))
    score = draw(st.sampled_from(["scaled_multiplicative", "multiplicative"]))
    mask = draw(st.sampled_from(["causal"] * 5 + ["forward"]))
    body = [f"attention sa {{ {qkv}  score = {score}  mask = {mask}{heads}{extra} }}",
            "update y = norm(y + sa)"]
    src = [f for f, ax in m.seqs if ax is not None]
    if src and draw(st.booleans()):
        h = draw(st.sampled_from(src))
        cross = draw(st.sampled_from([f"keys = project({h})  values = {h}  score = general",
                                      f"features = {h}  score = scaled_multiplicative",
                                      f"features = {h}  score = additive"]))
        body += [f"attention ca {{ query = project(y)  {cross} }}", "update y = norm(y + ca)"]
    if draw(st.booleans()):
        body.append("update y = norm(y + ffn(y, 16))")
    if draw(st.booleans()):
        r = m.new("dec")
        m.lines.append(f"repeat {r} {draw(st.sampled_from(['2', 'hops']))} {{")
        m.lines += ["    " + b for b in body]
        m.lines.append("}")
    else:
        m.lines += body
    tie = draw(st.sampled_from(["", ", tie = emb", ", tie = emb"]))
    m.outputs.append(f"classify(y, 20{tie})")


def add_penalised(draw, m) -> None:
    """Supervised attention (Liu et al.: a gold ``alignment[Q, K]``) or Xu et al.'s
    doubly stochastic penalty, on a module whose query runs over an axis."""
    axed = [(f, ax) for f, ax in m.seqs if ax is not None]
    if not axed:
        return
    keys, kax = draw(st.sampled_from(axed))
    query, qax = draw(st.sampled_from(axed + [(keys, kax)] * 2))
    q = draw(st.sampled_from([query, f"project({query})"]))
    kind = draw(st.sampled_from(["supervised", "doubly", "doubly", "coverage"]))
    if kind == "supervised":
        gold = m.new("gold")
        m.lines.append(f"input {gold}: alignment[{qax}, {kax}]")
        pen = draw(st.sampled_from([f"supervised({gold}, 1.0)", f"supervised({gold})",
                                    f"supervised({gold}, 0.5, loss = squared)",
                                    f"supervised({gold}, 0.5, loss = cross_entropy)"]))
    elif kind == "doubly":
        pen = draw(st.sampled_from(["doubly_stochastic", "doubly_stochastic(0.1)",
                                    "doubly_stochastic(1)"]))
    else:
        pen = draw(st.sampled_from(["coverage", "coverage(0.5)"]))
    score = draw(st.sampled_from(["additive", "general", "scaled_multiplicative",
                                  "multiplicative"]))
    extra = draw(st.sampled_from(["", "", "  heads = 2", "  dropout = 0.1",
                                  "  align = sparsemax"]))
    if kind == "supervised":  # not on a key of weight 0 (sparsemax, a mask's): the
        extra = extra.replace("  align = sparsemax", "")  # loss -log 0 is a ValueError
    elif qax == kax and query == keys and rarely(draw, 3):
        extra += "  mask = causal"  # (the same, on the keys the mask hides)
    name = m.new("pa")
    m.lines.append(f"attention {name} {{ query = {q}  features = {keys}  score = {score}"
                   f"{extra}  penalty = {pen} }}")
    m.seqs.append((name, qax))
    m.atts.append(name)


def rarely(draw, n: int = 6) -> bool:
    return draw(st.integers(0, n - 1)) == 0


def add_resize(draw, m) -> None:
    """``resize(x, like)``: x's positions resampled to those of another sequence."""
    axed = [(f, ax) for f, ax in m.seqs if ax is not None]
    if not axed:
        return
    x, _ = draw(st.sampled_from(axed))
    like, ax = draw(st.sampled_from(axed))
    if len(axed) == 1 or rarely(draw, 4):  # a sequence of its own, of another length
        like, ax = m.new("xr"), m.new("R").upper()
        fixed = draw(st.sampled_from(["", f" ({ax} = 3)", f" ({ax} = 9)"]))
        m.lines.append(f"input {like}: sequence[{ax}, 4]{fixed}")
    r = m.new("rs")
    inner = draw(st.sampled_from([x, f"norm({x})", f"linear({x}, d)"]))
    m.lines.append(f"feature {r} = resize({inner}, {like})")
    if rarely(draw, 4):
        m.lines.append(f"feature {r}b = {r} + resize(mean({x}), {like})")  # no axes: kept
        r = f"{r}b"
    m.seqs.append((r, ax))


def add_view(draw, m) -> None:
    """``of =``: the characters of the words input, another view of its data (Fig. 7),
    read by word-level attention or flattened."""
    w, c = m.new("wd"), m.new("ch")
    W, C = f"W{m.n}", f"C{m.n}"
    m.lines.append(f"input {w}: tokens[{W}] (vocab = 20)")
    m.lines.append(f"input {c}: tokens[{W}, {C}] (vocab = 12, of = {w})")
    fw, fc = m.new("fw"), m.new("fc")
    m.lines.append(f"feature {fw} = embed({w}, d)")
    m.lines.append(f"feature {fc} = embed({c}, d)")
    how = draw(st.sampled_from(["attend", "flatten", "pool"]))
    if how == "attend":  # a word vector from its characters
        a = m.new("ca")
        m.lines.append(f"attention {a} {{ query = learned(d)  features = {fc}  "
                       f"score = {draw(st.sampled_from(['additive', 'general']))} }}")
        j = m.new("wc")
        m.lines.append(f"feature {j} = linear(concat({fw}, {a}), d)")
        m.seqs.append((j, W))
    elif how == "flatten":  # every character a position, the words' context as query
        a = m.new("av")
        m.lines.append(f"attention {a} {{ query = {fw}  features = flatten({fc})  "
                       f"score = general }}")
        m.seqs.append((a, W))
    else:
        j = m.new("wc")
        m.lines.append(f"feature {j} = {fw} + mean({fc})")
        m.seqs.append((j, W))
    m.seqs.append((fw, W))


def add_literal_size(draw, m) -> None:
    """A size written as a number (or a constant) equal to an axis length: one weight
    per position of N (``context(h, learned(5))``, ``a.weights + learned(5)``), and the
    same number as a feature size beside it (``stack(learned(8), mean(h))``, d = 8), which
    keeps its own value where nothing ties it to N (``h * a.weights``)."""
    x, ax, h = m.new("xn"), f"N{m.n}", m.new("hn")
    n, width = draw(st.sampled_from([("5", "6"), ("8", "d"), ("d", "d"), ("8", "8")]))
    m.lines.append(f"input {x}: {draw(st.sampled_from(['sequence', 'set']))}"
                   f"[{ax}, {width}] ({ax} = {n if n != 'd' else 8})")
    m.lines.append(f"feature {h} = linear({x}, d)")
    m.seqs.append((h, ax))
    m.fixed.append(h)
    forms = ["context", "weights", "gen", "dropout", "scaled", "stack", "stack"]
    form = draw(st.sampled_from(forms))
    if form == "context":
        m.outputs.append(f"classify(context({h}, learned({n})), 3)")
    elif form == "gen":  # weights predicted from the set
        m.outputs.append(f"classify(context({h}, tanh(linear(mean({h}), {n}))), 3)")
    elif form == "dropout":
        m.outputs.append(f"classify(context({h}, dropout(learned({n}), 0.1)), 3)")
    elif form in ("weights", "scaled"):
        a = m.new("wl")
        m.lines.append(f"attention {a} {{ query = learned(d)  features = {h}  score = general }}")
        m.outputs.append(f"classify({a}.weights + learned({n}), 3)" if form == "weights"
                         else f"{h} * {a}.weights")
    else:  # a representation of the size of the axis length, beside the pooled sequence
        a = m.new("sl")
        m.lines.append(f"attention {a} {{ query = learned(d)  features = stack(learned(8), "
                       f"mean({h}){draw(st.sampled_from(['', ', learned(d)']))})  "
                       "score = general }")
        m.atts.append(a)
        if draw(st.booleans()):  # each position of N scaled by its weight
            w = m.new("wl")
            m.lines.append(f"attention {w} {{ query = learned(d)  features = {h}  "
                           "score = general }")
            m.outputs.append(f"{h} * {w}.weights")


def add_many_axes(draw, m) -> None:
    """An input with three to ten axes (a hierarchy deeper than Fig. 8's; more than 8 are
    refused), now and then 40, some of them of a fixed length."""
    k = 40 if rarely(draw, 20) else draw(st.integers(3, 10))
    axes = [f"A{m.n}x{i}" for i in range(k)]
    fixed = draw(st.sampled_from(["", "", f"{axes[0]} = 8", f"{axes[0]} = 7, {axes[1]} = 9",
                                  ", ".join(f"{a} = 8" for a in axes)]))
    x = m.new("xm")
    if draw(st.booleans()):
        m.lines.append(f"input {x}: tokens[{', '.join(axes)}] "
                       f"(vocab = 20{', ' + fixed if fixed else ''})")
        base = f"embed({x}, d)"
    else:
        m.lines.append(f"input {x}: sequence[{', '.join(axes)}, 3]"
                       f"{f' ({fixed})' if fixed else ''}")
        base = f"linear({x}, d)"
    f = m.new("hm")
    m.lines.append(f"feature {f} = {base}")
    a = m.new("am")  # the innermost axis attended: one vector per position of the others
    m.lines.append(f"attention {a} {{ query = learned(d)  features = {f}  "
                   f"score = {draw(st.sampled_from(['additive', 'general']))} }}")
    m.seqs.append((a, axes[-2]))


def add_capsules_grid(draw, m) -> None:
    """Capsule-based attention (one learned query per class, eq. 43-45) over an image's
    positions: its features, or the image itself."""
    x = m.new("img")
    H, W = f"H{m.n}", f"W{m.n}"
    m.lines.append(f"input {x}: grid[{H}, {W}, 3] ({H} = 4, {W} = 4)")
    feats = draw(st.sampled_from([f"conv2d({x}, d)", f"flatten(conv2d({x}, d))",
                                  f"flatten(conv2d({x}, d, stride = 2))", x, x]))
    a = m.new("cg")
    q = draw(st.sampled_from(["", "query = learned(d)  "]))
    score = draw(st.sampled_from(["additive", "general", "multiplicative"]))
    m.lines.append(f"attention {a} {{ {q}features = {feats}  score = {score}  "
                   f"capsules = {draw(st.sampled_from(['2', '3']))} }}")
    m.outputs.append(a)


def let_chain(draw) -> list[str]:
    """``let lc0 = 2``, ``let lc1 = (lc0 + 2) / 2``, …: n constants, each defined from
    the one before (all 2), the last one read by `d`."""
    n = draw(st.sampled_from([3, 30, 300, 1000]))
    return ["let lc0 = 2"] + [f"let lc{i} = (lc{i - 1} + 2) / 2" for i in range(1, n)]


# the parts beside specgen.PARTS
NEW_PARTS = [add_penalised, add_penalised, add_resize, add_view, add_literal_size,
             add_many_axes, add_capsules_grid]
# the KNOWN_DEFECTS flags the parts read in ``m.avoid`` (none: every defect found is fixed)
AVOIDABLE: tuple[str, ...] = ()
