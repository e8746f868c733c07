"""The drop-in layer's ``Config`` (``codegen/layer.py``): its fields, and the checks its
``widths()`` runs, from ``__post_init__``, on every width and count against the others.

A width the spec writes as a projection without a number (``project(x)``: x's width; the
keys of a ``kv_heads`` module: kv_heads heads of the query heads' width) is a field left
``None`` that ``widths()`` works out from the others, so that ``Config(d_q=64, d_k=64,
d_v=64)`` gives a 64-wide layer as the spec would. Each refusal names the field to change
and the value that fits; the class's own checks never see a Config that passed these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .. import ir
from .. import mechanisms as mech
from . import depth
from .pretty import wrap


class Derived(NamedTuple):
    """A width field left None: the code that gives it over ``w`` and what it is (kv_heads:
    the query heads' width times kv_heads / heads; input: the input's width, as project(x);
    score: the score's hidden width, the query's)."""

    code: str
    kind: str


# the least value of each count a statement's Config may hold (the others: 1)
LEAST = {"window": 0, "buckets": 2}
MASKS = ("none", "causal", "forward", "backward")


@dataclass(frozen=True)
class Field:
    """One field of the layer's Config: ``name: type = value  # comment``."""

    name: str
    type: str
    value: str
    comment: str


@dataclass(frozen=True)
class Widths:
    """What ``widths()`` builds: the fields, the lines that resolve and check them."""

    fields: list[Field]
    lines: list[str]


def fields_and_checks(cm, n: ir.Attention, q, k, v, args: list[mech.CtorArg]) -> Widths:
    """The Config of statement ``n`` whose query, keys and values the layer gets as the
    roles ``q``, ``k``, ``v`` (``layer.Role``), and the constructor arguments ``args``."""
    out: list[Field] = []
    derived: dict[str, Derived] = {}  # field left None -> how w gives it
    kv = bool(n.kv_heads)
    for r, what in ((q, "queries"), (k, "keys"), (v, "values")):
        if r.kind in ("none", "keys"):
            continue
        if r.own and r.name == "q":
            if len(r.own) == 2:
                out.append(Field("n_queries", "int", str(r.own[0]),
                                 "K: the learned queries (learned(K, d), eq. 34)"))
            out.append(Field(f"d_{r.name}", "int", str(r.d_in),
                             "width of the learned query (eq. 34)"))
        elif r.own:  # the keys and values run over the same positions (check/attention)
            if len(r.own) == 2 and "n_kv" not in {f.name for f in out}:
                out.append(Field("n_kv", "int", str(r.own[0]),
                                 "K: the learned keys and values (learned(K, d))"))
            out.append(Field(f"d_{r.name}", "int", str(r.d_in), f"width of the learned {what}"))
        else:
            if len(r.slots) == 2 and "n_slots" not in {f.name for f in out}:
                out.append(Field("n_slots", "int", str(r.slots[0]), "M: the learned memory "
                                 "slots before the keys and values (prepend)"))
            out.append(Field(f"d_{r.name}", "int", str(r.d_in),
                             f"width of the {what} forward() is given"))
        if r.kind != "project":
            continue
        eq = "35" if r.name == "q" else "1"
        name = f"d_{r.name}_proj"
        if kv and r.name in ("k", "v"):  # g heads of the query heads' width (check/grouped.py)
            derived[name] = Derived('self.kv_heads * w["q"] // self.heads', "kv_heads")
            out.append(Field(name, "int | None", "None", f"width of W_{r.name.upper()} "
                             f"{r.name} (eq. {eq}); None: kv_heads * d_q_proj / heads"))
        elif r.sized:
            out.append(Field(name, "int", str(r.d), f"width of W_{r.name.upper()} {r.name} "
                             f"(eq. {eq})"))
        else:  # project(x): x's width
            derived[name] = Derived(f'w["d_{r.name}"]', "input")
            out.append(Field(name, "int | None", "None", f"width of W_{r.name.upper()} "
                             f"{r.name} (eq. {eq}); None: d_{r.name}, as project(x)"))
    out.append(Field("heads", "int", str(n.heads), "attention heads (eq. 38)"))
    for a in args:
        if a.name in ("d_q", "d_k", "d_v", "heads"):
            continue
        if a.name == "d_w" and a.value(n) is None:  # the score's hidden width: the query's
            derived["d_w"] = Derived('w["q"]' if q.kind != "none" else 'w["k"]', "score")
            out.append(Field("d_w", "int | None", "None", "width of the score's hidden "
                             "layer; None: the query's width as the attention reads it"))
            continue
        if depth.pattern(n, a):  # a value by the layer's depth l: l is the field
            out.append(Field("depth", "int", str(n.hop.index),
                             f"the layer l (1 first) that {a.name} is computed from"))
            continue
        value = cm.sizes[cm.attention[n.id].attended] if a.name == "n_keys" else a.value(n)
        out.append(Field(a.name, a.type, mech.literal(value), a.comment))
    return Widths(out, _lines(n, q, k, v, out, derived))


def _lines(n: ir.Attention, q, k, v, fields: list[Field],
           derived: dict[str, Derived]) -> list[str]:
    """The body of Config.widths(): each field's type and range, the widths left None worked
    out, then the rules between them (each message names the field to change)."""
    names = {f.name for f in fields}
    lines = []
    for f in fields:
        if f.type in ("int", "int | None"):
            optional = ", True" if f.type == "int | None" else ""
            lines.append(f'check_count("{f.name}", self.{f.name}, {LEAST.get(f.name, 1)}'
                         f'{optional})')
    if "mask" in names:
        lines += ["if self.mask not in " + repr(MASKS) + ":",
                  *raise_lines("Config.mask = {self.mask!r}: one of " + ", ".join(MASKS))]
    if "dropout" in names:
        lines += ["if not 0.0 <= self.dropout < 1.0:",
                  *raise_lines("Config.dropout = {self.dropout!r}: a probability in [0, 1)")]
    # w: the widths by field, those left None worked out; w["q"], w["k"], w["v"]: the widths
    # the attention class reads, and name[…] the field that sets each
    widths = [f.name for f in fields if f.name.startswith("d_") and f.name != "d_w"]
    lines += wrap("w = {" + ", ".join(f'"{x}": self.{x}' for x in widths) + "}", 8, 100)
    read = reads(n, q, k, v)
    late = {f: d.code for f, d in derived.items() if d.kind == "kv_heads"}
    for name, d in derived.items():
        if name != "d_w" and name not in late:
            lines += [f"if self.{name} is None:", f'    w["{name}"] = {d.code}']
    if "q" in read:
        lines.append(f'w["q"] = w["{read["q"]}"]')
    for name, expr in late.items():
        lines += [f"if self.{name} is None:", f'    w["{name}"] = {expr}']
    lines += [f'w["{r}"] = w["{read[r]}"]' for r in ("k", "v") if r in read]
    who = []
    for r, field in read.items():
        src = derived.get(field)
        who.append(f'"{r}": "{field}"' if src is None or src.kind != "input" else
                   f'"{r}": "{field[:-5]}" if self.{field} is None else "{field}"')
    lines += wrap("name = {" + ", ".join(who) + "}", 8, 100)
    lines += _rules(n, read, derived)
    if "d_w" in derived:
        lines.append(f'w["d_w"] = {derived["d_w"].code} if self.d_w is None else self.d_w')
    elif "d_w" in names:
        lines.append('w["d_w"] = self.d_w')
    lines.append("return w")
    return lines


def reads(n: ir.Attention, q, k, v) -> dict[str, str]:
    """The Config field whose width the attention class reads as its q, k and v (a learned
    capsule query: the keys' width)."""
    def field(r) -> str:
        return f"d_{r.name}_proj" if r.kind == "project" else f"d_{r.name}"
    out = {"k": field(k), "v": field(k if v.kind == "keys" else v)}
    if q.kind != "none":
        out["q"] = field(q)
    elif n.query is not None:  # learned capsule queries, as wide as the keys
        out["q"] = out["k"]
    return out


def _rules(n: ir.Attention, read: dict[str, str], derived: dict[str, Derived]) -> list[str]:
    lines = []
    kv = bool(n.kv_heads)
    split = n.heads > 1 and n.query is not None

    def refuse(test: str, message: str) -> None:
        lines.extend([f"if {test}:", *raise_lines("Config: " + message)])

    if n.heads == 1:  # the class is planned with one head (classes.class_key)
        refuse("self.heads != 1", "heads = {self.heads}: this attention's class has one head "
               "(the spec's heads = 1): set heads = 1, or export a statement with heads > 1")
    if kv:
        refuse("self.heads % self.kv_heads", "kv_heads = {self.kv_heads} must divide heads = "
               "{self.heads} (each key/value head serves heads / kv_heads query heads): "
               "change kv_heads")
    if split:
        for r in ("q",) + (() if kv else ("k", "v")):
            refuse(f'w["{r}"] % self.heads', f'heads = {{self.heads}} must divide '
                   f'{{name["{r}"]}} = {{w["{r}"]}} (each head reads an equal slice, eq. 38): '
                   f'change heads or {{name["{r}"]}}')
    if kv:
        want = 'self.kv_heads * w["q"] // self.heads'
        for r, what in (("k", "keys"), ("v", "values")):
            test = f'w["{r}"] != {want}'
            d = derived.get(read[r])
            if d is not None and d.kind == "kv_heads":  # None: right by construction
                test = f"self.{read[r]} is not None and " + test
            refuse(test, f'{{name["{r}"]}} = {{w["{r}"]}} must be kv_heads * {{name["q"]}} / '
                   f'heads = {{self.kv_heads}} * {{w["q"]}} / {{self.heads}} = {{{want}}} (the '
                   f"{what} hold kv_heads heads of the query heads' width): set "
                   f'{{name["{r}"]}} = {{{want}}}'
                   + (", or None" if read[r] in derived else ""))
    score = mech.score(n.score.fn)
    if score.equal_qk and not kv and "q" in read:
        refuse('w["k"] != w["q"]', f'{{name["k"]}} = {{w["k"]}} must equal {{name["q"]}} = '
               f'{{w["q"]}}: the {n.score.fn.replace("_", " ")} score multiplies queries and '
               f'keys of one width; set {{name["k"]}} = {{w["q"]}}')
    if split and any(rec.pairs for rec, _ in mech.modifiers(n)):
        refuse('w["q"] // self.heads % 2', '{name["q"]} / heads = {w["q"] // self.heads} must '
               "be even: rotary positions turn pairs of each head's features; change "
               '{name["q"]} or heads')
    if split and n.qk_norm is not None and n.qk_norm.groups != 1:
        refuse('w["q"] // self.heads % self.qk_groups', 'qk_groups = {self.qk_groups} must '
               'divide {name["q"]} / heads = {w["q"] // self.heads} (q and k of each head are '
               "normalised in equal parts): change qk_groups")
    _, arg, what = n.join.record.parts if n.heads > 1 and n.join is not None else ("",) * 3
    if arg:  # a join's equal parts side by side are the context (routing's capsules)
        wide = 'w["v"] // self.kv_heads * self.heads' if kv else 'w["v"]'
        refuse(f"({wide}) % self.{arg}", f"{arg} = {{self.{arg}}} must divide the context's "
               f"{{{wide}}} features ({what}): change {arg}")
    if any(a.name == "buckets" for a in mech.align(n.align.fn).ctor):  # LSH (Kitaev et al.)
        refuse("self.buckets % 2", "buckets = {self.buckets} must be even (LSH hashes "
               "argmax([xR; -xR]) into buckets): change buckets")
    return lines


def raise_lines(message: str, indent: int = 8) -> list[str]:
    """``raise ValueError(f"…")`` at 4 columns (the Config's lines are at ``indent``), the
    message packed into pieces at spaces outside its replacement fields so that every line
    stays within 100 columns; the fields' own quotes are single."""
    words, cur, depth = [], "", 0
    for ch in message:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += "'" if ch == '"' and depth else ch
        if ch == " " and not depth:
            words.append(cur)
            cur = ""
    words.append(cur)
    room = 100 - indent - 21 - 4  # the column of the pieces, f and the quotes, ")"
    pieces = [""]
    for word in words:
        if pieces[-1] and len(pieces[-1] + word.rstrip()) > room:
            pieces.append("")
        pieces[-1] += word
    body = [f'f"{p}"' if "{" in p else f'"{p}"' for p in pieces if p]
    if len(body) == 1:
        return [f"    raise ValueError({body[0]})"]
    return [f"    raise ValueError({body[0]}", *(" " * 21 + b for b in body[1:-1]),
            " " * 21 + body[-1] + ")"]


def learned_shape(e: ir.Op) -> tuple[int, ...]:
    """The shape of the parameter ``learned(d)`` (d,) or ``learned(K, d)`` (K, d) holds."""
    d, count = int(e.param("d")), e.param("n")
    return (d,) if count is None else (int(count), d)


def is_learned(e) -> bool:
    return isinstance(e, ir.Op) and e.fn == "learned"

