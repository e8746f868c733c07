"""`taxcompile lift --torch`: what the reader recognised in a captured graph, written back as a
`.attn` sketch. One model: the graph's inputs (shapes from their placeholders' meta), token
inputs embedded where the graph embeds them, learned queries (``lift_learned``), and one
`attention` statement per recognised attention (score, alignment, heads, key/value heads,
causal mask, widths, rotary positions and ALiBi biases: ``lift_position``); the steps of a
recurrent decoder as one decoder (``lift_recurrent``) and a stack of layers as one `repeat`
(``lift_repeat``). The network between the inputs and the attentions is not lifted: each
operand is written as a projection of the input nearest to it, and comments (`# not
lifted: …`) say where the sketch stops. Nothing from the graph reaches the text but
identifiers made valid here, integers and a rotary base (a float). The sketch is checked
before it is returned; an attention the checker refuses becomes a comment with the
checker's message."""
from __future__ import annotations

import keyword
import re

from .. import mechanisms as mech
from .lift_learned import learned_queries, reach, update
from .lift_recurrent import decoders, mark_autoregressive
from .lift_repeat import Entry, _Graph, is_decoder, render, stacks
from .normalise import TRANSPARENT, is_bool, op, shape, strip, tensor_args

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Scores a statement names on its own: every registry score but those over an affinity
# matrix (a statement of its own) and one that computes no scores (its alignment's weights
# are its own).
SCORES = {n for n, m in mech.SCORES.items() if not m.needs_affinity and "no_score" not in m.caps}
DOT = {"multiplicative", "scaled_multiplicative", "general", "biased_general",
       "activated_general"}
# Alignments the reader finds that a statement writes without parameters, as it writes
# them: the plain softmax as the default (None).
ALIGNS = {n: None if m.plain else n for n, m in mech.ALIGNS.items()
          if m.recognised_by and not any(p.required for p in m.params)}
MAX_NEAREST = 20_000  # nodes visited looking for an operand's nearest input


class LiftError(Exception):
    """What stops a sketch (nothing left to lift, a sketch that does not check): one line
    for the command line."""


def ident(text: str, taken: set, fallback: str = "x") -> str:
    """A valid spec identifier from ``text`` (a graph node's name), unique among ``taken``."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", str(text)).strip("_") or fallback
    if base[0].isdigit():
        base = f"{fallback}_{base}"
    if keyword.iskeyword(base) or base in _reserved():
        base += "_"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    assert _IDENT.match(name)
    taken.add(name)
    return name


def _reserved() -> frozenset[str]:
    """The language's own words (statement keywords from the grammar, `shared`, `true`, …):
    kept out of the names a sketch makes."""
    from ..vocabulary import vocabulary

    v = vocabulary()
    return frozenset(v.keywords + v.modifiers + v.constants)


def comment(text: str) -> str:
    """A reason as one comment line: the characters of identifiers, numbers and prose only."""
    return "# " + re.sub(r"[^A-Za-z0-9_ .,:;()=+*/<>'`\[\]-]", " ", str(text))[:300]


def _int(v) -> int | None:
    """A size from a shape: a positive Python int, or None (symbolic or missing)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _embedding(ph):
    """(vocab, width) of the embedding table the graph looks ``ph``'s token ids up in."""
    frontier = [ph]
    for _ in range(6):
        nxt = []
        for n in frontier:
            for u in n.users:
                if op(u) == "embedding" and len(tensor_args(u)) >= 2:
                    s = shape(tensor_args(u)[0]) or ()
                    if len(s) == 2 and _int(s[0]) and _int(s[1]):
                        return s[0], s[1]
                elif op(u) in TRANSPARENT:
                    nxt.append(u)
        frontier = nxt
    return None


def inputs(r, graph, taken: set) -> tuple[list, dict, list]:
    """(statement lines, placeholder name -> (feature name, width, input name), comments)."""
    lines, feats, notes = [], {}, []
    axes_by_len: dict = {}  # one axis per length: keys and values of one length align

    def axes(dims):
        return [axes_by_len.setdefault(d, f"L{len(axes_by_len)}") for d in dims]
    for ph in (n for n in graph.nodes if n.op == "placeholder" and not r.is_param(n)):
        s, v = shape(ph), ph.meta.get("val")
        name = ident(ph.name, taken, "in")
        if s is not None and is_bool(ph) and len(s) == 3 and _int(s[1]) and _int(s[2]):
            t, k = axes([s[1], s[2]])
            lines.append(f"input {name}: mask[{t}, {k}]")
            feats[ph.name] = (name, None, name)  # read by `mask = NAME`, never as features
            continue
        if s is None or is_bool(ph):
            notes.append(f"# not lifted: input `{name}` (a mask not of shape (B, Lq, Lk), "
                         "or no tensor)")
            continue
        dims = [_int(d) for d in s[1:]]
        if not dims or None in dims:
            notes.append(f"# not lifted: input `{name}` (no batch of fixed sizes)")
            continue
        ints = not getattr(v, "dtype", None) or not v.dtype.is_floating_point
        if ints:
            emb = _embedding(ph)
            if emb is None or len(dims) > 2:
                notes.append(f"# not lifted: input `{name}` (token ids the graph does not "
                             "look up in one embedding table)")
                continue
            names = axes(dims)
            feat = ident(f"{name}_emb", taken)
            lines.append(f"input {name}: tokens[{', '.join(names)}] (vocab = {emb[0]}, "
                         + ", ".join(f"{a} = {d}" for a, d in zip(names, dims)) + ")")
            lines.append(f"feature {feat} = embed({name}, {emb[1]})")
            feats[ph.name] = (feat, emb[1], name)
        elif len(dims) == 1:
            lines.append(f"input {name}: vector[{dims[0]}]")
            feats[ph.name] = (name, dims[0], name)
        elif len(dims) <= 8:
            names = axes(dims[:-1])
            lines.append(f"input {name}: sequence[{', '.join(names)}, {dims[-1]}] ("
                         + ", ".join(f"{a} = {d}" for a, d in zip(names, dims)) + ")")
            feats[ph.name] = (name, dims[-1], name)
        else:
            notes.append(f"# not lifted: input `{name}` (more than 8 axes)")
    return lines, feats, notes


def nearest(r, node, feats):
    """The input placeholder nearest to ``node`` (fewest ops back) that the sketch lifted:
    a decoder layer's query reads the target before the encoder's output. Learned tables
    (``lift_learned``) count as inputs: ``feats.reach`` holds the nodes computed from them."""
    seen, frontier = {node}, [node]
    learned = getattr(feats, "reach", ())
    while frontier and len(seen) < MAX_NEAREST:
        hits = sorted(n.name for n in frontier if n.op in ("placeholder", "get_attr")
                      and n.name in feats and feats[n.name][1] is not None)
        if hits:
            return hits[0]
        nxt = []
        for n in frontier:
            for a in tensor_args(n):
                if a not in seen and (r.roots(a) or a in learned):
                    seen.add(a)
                    nxt.append(a)
        frontier = nxt
    return None


def _last(node) -> int | None:
    s = shape(node) if node is not None else None
    return _int(s[-1]) if s else None


def widths(a, h: int) -> dict:
    """field -> its width: the operand's last axis (one head's features where the heads are
    split) times its heads; a dot-product score's keys have the query's per-head width."""
    kv = a.kv_heads if _int(a.kv_heads) else h
    dq = _last(a.query)
    dk = dq if dq and a.names.get("score") in DOT else _last(a.keys)
    dv = _last(a.weighed)
    return {"query": dq and dq * h, "keys": dk and dk * kv, "values": dv and dv * kv}


def operand(r, node, feats, w: int | None):
    """(expression, comment) for a query, keys or values operand; (None, why) where none."""
    if node is None:
        return None, ""
    src = nearest(r, node, feats)
    if src is None:
        return None, "reads no input the sketch lifted"
    feat, d_in = feats[src][:2]
    if strip(node).op in ("placeholder", "get_attr"):
        return feat, ""
    from .products import projection

    at = ident(strip(node).name, set(), "n")
    note = "" if projection(node, r) else \
        f"the ops between `{feat}` and `{at}` are written as a projection"
    if w is None or w == d_in:
        return f"project({feat})", note
    return f"project({feat}, {w})", note


def _align(a) -> tuple[str | None, str]:
    """(the `align = …` value or None for the default, why not lifted: '' where lifted)."""
    name = a.names.get("align", "")
    if name == "topk":
        from .products import ancestors

        ks = [x.args[1] for m in a.masks for x in [m, *ancestors(m, 8)]
              if op(x) == "topk" and len(x.args) > 1]
        if ks and _int(ks[0]):
            return f"topk(k = {ks[0]})", ""
        return None, "its top-k's k is not a constant of the graph"
    if name in ALIGNS and a.align_args:  # parameters read from the graph
        return name + "(" + ", ".join(f"{k} = {_value(v)}" for k, v in a.align_args.items()) \
            + ")", ""
    if name in ALIGNS:
        return ALIGNS[name], ""
    return None, f"its alignment `{ident(name, set(), 'a')}` needs parameters not read here"


def _value(v) -> str:
    """A parameter's value as a spec writes it."""
    return ("true" if v else "false") if isinstance(v, bool) else f"{v:g}" \
        if isinstance(v, float) else str(v)


def attention(r, a, name: str, feats, query: str | None = None) -> tuple[list, list]:
    """(the statement's lines, comments) for one recognised attention; ([], comments) where
    it cannot be written without a guess. ``query``: the query's expression where it is not
    an operand's projection (a decoder's state)."""
    from .products import ancestors
    from .queries import _is_causal

    score = a.names.get("score", "")
    if score not in SCORES:
        return [], [f"# not lifted: attention `{name}`: its score "
                    f"`{ident(score, set(), 's')}` needs more than one statement"]
    if score == "concat" and a.query is not None:
        score = "additive"  # w^T act(W [q; k]) = w^T act(W1 q + W2 k): one function
    align, why = _align(a)
    if why:
        return [], [f"# not lifted: attention `{name}`: {why}"]
    h = a.heads if _int(a.heads) else 1
    body, notes, w = [], [], widths(a, h)
    for field, node in (("query", a.query), ("keys", a.keys), ("values", a.weighed)):
        expr, note = (query, "") if field == "query" and query else \
            operand(r, node, feats, w[field])
        if expr is None and field == "keys":
            return [], [f"# not lifted: attention `{name}`: its keys {note}"]
        if expr is not None:
            body.append(f"{field} = {expr}")
        if note:
            notes.append(f"# not lifted: {field}: {note}")
    body.append(f"score = {score}")
    unread = [q.name for q in mech.score(score).params]
    if unread:  # the registry's defaults stand in for what the graph was not read for
        notes.append(f"# not lifted: the score's {', '.join(unread)}: the registry's "
                     "defaults, not read from the graph")
    if align:
        body.append(f"align = {align}")
    if a.values.get("dimensionality", ("",))[0] == "Multi-Dimensional":
        body.append("dimensionality = multi")
    if h > 1:
        body.append(f"heads = {h}")
        if _int(a.kv_heads) and a.kv_heads != h:
            body.append(f"kv_heads = {a.kv_heads}")
    given = sorted({feats[x.name][0] for m in a.masks for x in [m, *ancestors(m, 8)]
                    if x.op == "placeholder" and feats.get(x.name, (0, 0))[1] is None})
    causal = ["causal"] if _is_causal(a) else []
    if causal or given:
        body.append(f"mask = {' * '.join(causal + given)}")
    from .lift_position import position_lines

    pos, pos_notes = position_lines(r, a, score, _last(a.query),
                                    getattr(feats, "consts", None))
    body += pos
    notes += pos_notes
    if given:
        notes.append(f"# not lifted: whether True in `{given[0]}` shows or hides a key (in "
                     "the spec, True = may see)")
    others = [m for m in a.masks if "topk" not in {op(x) for x in [m, *ancestors(m, 8)]}]
    if others and not causal and not given:
        notes.append("# not lifted: a mask other than a causal one or a mask input")
    return [f"attention {name} {{", *(f"    {b}" for b in body), "}"], notes


def decoder(r, atts, d, name: str, feats, taken: set) -> tuple[list, list, str] | None:
    """(lines, comments, the decoder's input) for the steps of one recurrent decoder
    (``lift_recurrent``): its state a `gru`/`lstm` over the one input the second step's query
    reads and its keys do not, fed the attention; None where no such input was lifted."""
    a, nxt = atts[d.first], atts[d.first + 1]
    ins = sorted(x for x in r.roots(nxt.query) - r.roots(nxt.keys)
                 if x in feats and feats[x][1] is not None)
    if len(ins) != 1:
        return None
    feat, _, src = feats[ins[0]]
    state = ident("state", taken)
    stmt, notes = attention(r, a, name, feats,
                            query=state if d.reads_input_first else f"prev({state})")
    if not stmt:
        return None
    why = [f"# attentions {d.first + 1} to {d.last + 1}: the steps of one recurrent decoder, "
           f"a `{d.cell}` of {d.hidden}", f"# over `{feat}` whose state queries each step",
           "# not lifted: the decoder's initial state and layers, the ops between its state "
           "and the score,", f"# and what of the context it is fed (written `feed = {name}`)"]
    return [f"query {state} = {d.cell}({feat}, {d.hidden}, feed = {name})", *stmt], \
        [*why, *notes], src


def _stacked(r, blocks: list, entries: list, in_lines: list, feats, taken) -> list:
    """``blocks`` with each layer stack among the attention statements ``entries`` ((block
    index, Entry)) written as one `repeat` (``lift_repeat``); a decoder's stream input is
    marked `autoregressive`."""
    at = [i for i, _ in entries]
    es = [e for _, e in entries]
    out, renames = list(blocks), []
    for s in stacks(r, es, {f[0]: f[1] for f in feats.values()}):
        idx = at[s.start:s.start + s.block * s.count]
        src = [f[2] for f in feats.values() if f[0] == s.stream and f[2]]
        lines, notes = render(s, es, lambda base: ident(base, taken))
        for sub, h in renames:
            lines = [sub.sub(h, x) for x in lines]
        if src == [s.stream]:  # an input is never updated: the stack carries a copy
            h = ident(f"{s.stream}_h", taken)
            sub = re.compile(rf"\b{s.stream}\b(?!:)")
            renames.append((sub, h))
            for i in range(idx[0] + 1, len(out)):
                if out[i] is not None:
                    out[i] = ([sub.sub(h, x) for x in out[i][0]], out[i][1])
            lines = [f"feature {h} = {s.stream}", *(sub.sub(h, x) for x in lines)]
        out[idx[0]] = (lines, [*blocks[idx[0]][1], *notes])
        for i in idx[1:]:
            out[i] = None
        if is_decoder(s, es) and src:
            in_lines[:] = mark_autoregressive(in_lines, src[0])
            out[idx[0]][1].append(f"# `{src[0]}` is autoregressive: a causal self-attention "
                                  "reads it, its queries read another input")
    return [b for b in out if b is not None]


def _render(title: str, head: list, blocks: list) -> tuple[str, dict]:
    """(text, line number -> block index) of the sketch."""
    lines = [*head, "", f"model {title} {{"]
    where = {}
    for i, (stmt, notes) in enumerate(blocks):
        for x in [*notes, *stmt]:
            lines.append(f"    {x}" if x else "")
            where[len(lines)] = i
    lines.append("}")
    return "\n".join(lines) + "\n", where


def _refused(text: str, where: dict) -> dict:
    """Block index -> the checker's first message on it; {} where the sketch checks."""
    from ..diagnostics import SpecError
    from ..pipeline import load_text

    try:
        load_text(text, "<lift>")
    except SpecError as e:
        out = {}
        for d in e.diagnostics:
            if d.loc.line not in where:
                raise LiftError(f"the sketch does not check: {d.message}") from None
            out.setdefault(where[d.loc.line], d.message.splitlines()[0])
        return out
    return {}


class _Feats(dict):
    """Graph input name -> (feature, width, input name); ``reach``: the nodes computed from
    learned tables; ``consts``: the module's constants."""
    reach: frozenset | set = frozenset()
    consts = None


def sketch(r, graph, atts, title: str, head_comment: list, consts=None) -> str:
    """The checked sketch; ``consts``: the module's constants (``lift_constants``)."""
    taken = set()
    title = ident(title, taken, "lifted")
    in_lines, feats, in_notes = inputs(r, graph, taken)
    feats = _Feats(feats)
    feats.consts = consts
    tables = learned_queries(r, [a for a in atts if a.recognised])
    for p, (n, d) in tables.items():
        name = ident("latents", taken)
        in_lines.append(f"feature {name} = learned({n}, {d})")
        in_notes.append(f"# `{name}`: a learned {n} x {d} table the queries are computed from "
                        f"(`{ident(p.name, set(), 'p')}`)")
        feats[p.name] = (name, d, None)  # a feature, no input: never marked autoregressive
    feats.reach = reach(tables)
    learned = [feats[p.name] for p in tables]
    widths, g = {f[0]: f[1] for f in feats.values()}, None
    blocks, entries = [(in_lines, in_notes)], []
    decs = {d.first: d for d in decoders(r, atts)}
    steps = {i for d in decs.values() for i in range(d.first + 1, d.last + 1)}
    for i, a in enumerate(atts, 1):
        if i - 1 in steps:
            continue
        name = ident(f"att_{i}", taken)
        dec = decs.get(i - 1) and decoder(r, atts, decs[i - 1], name, feats, taken)
        if dec:
            blocks.append(dec[:2])
            in_lines[:] = mark_autoregressive(in_lines, dec[2])
            continue
        where = (f"# attention {i}: `{ident(a.norm, set(), 'n')}` weighing values at "
                 f"`{ident(a.applied_by, set(), 'n')}`")
        if not a.recognised:
            blocks.append(([], [where, comment(f"not lifted: attention {i} is not recognised: "
                                               f"{a.why_not}")]))
            continue
        stmt, notes = attention(r, a, name, feats)
        if stmt:
            dv, h = _last(a.weighed), a.heads if _int(a.heads) else 1
            entries.append((len(blocks), Entry(a, name, stmt, dv and dv * h)))
            if tables:  # a learned table the attention refines: later reads see the update
                g = g or _Graph(r)
                stmt = stmt + update(g, entries[-1][1], widths, {f[0] for f in learned})
        blocks.append((stmt, [where, *notes]))
    blocks = _stacked(r, blocks, entries, in_lines, feats, taken)
    if not atts:
        blocks.append(([], ["# not lifted: no attention found in the graph"]))
    paper = [f"paper {title} {{", '    cite = "Lifted from code"', "}"]
    for _ in range(len(blocks)):
        if not any(x.lstrip().startswith("attention ") for stmt, _ in blocks for x in stmt):
            why = [[n for n in notes if "not lifted" in n][-1] for _, notes in blocks[1:]
                   if any("not lifted" in n for n in notes)]
            raise LiftError("nothing to lift: " + (why[0].split(": ", 1)[1] if why else
                            "no attention was recognised"))
        text, where = _render(title, [*head_comment, *paper], blocks)
        bad = _refused(text, where)
        if not bad:
            from ..fmt import format_text

            return format_text(text, "<lift>")  # canonical: `taxcompile fmt --check` passes
        for i, msg in bad.items():
            if i == 0:
                raise LiftError(f"the sketch's inputs do not check: {msg}")
            stmt, notes = blocks[i]
            blocks[i] = ([], [*notes, comment(f"not lifted: the checker refuses it: {msg}"),
                              *(f"# {x}" for x in stmt)])
    raise LiftError("the sketch does not check")


def lift_module(module, example_inputs, title: str, target: str = "") -> str:
    """The `.attn` sketch of ``module``'s recognised attentions."""
    from .capture import capture
    from .recognise import Reader, find

    c = capture(module, example_inputs)
    atts = find(c.graph, c.params)
    shown = re.sub(r"[^A-Za-z0-9_.:]", "_", target)
    head = [f"# A sketch lifted by `taxcompile lift` from {shown or 'a PyTorch model'} "
            f"(captured with {c.method}):",
            "# the attentions it recognised and the inputs they read.",
            "# not lifted: the layers between the inputs and the attentions (each operand is "
            "written", "# as one projection of the input nearest to it in the graph)."]
    from .lift_constants import Constants

    return sketch(Reader(c.graph, c.params), c.graph, atts, title, head,
                  Constants(module, c.params))
