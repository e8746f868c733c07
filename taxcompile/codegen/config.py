"""The generated ``Config``: a field per constant the model's sizes use, properties for
derived constants, and ``Config.tiny()`` sizes that keep the model consistent."""

from __future__ import annotations

import math

from .. import ir
from .expr import parse_sym
from .names import NAME, Dim, sym_names
from .plan import ConfigField, ConfigPlan, ConfigProperty

ROLE_COMMENT = {"heads": "attention heads (eq. 38)", "vocab": "vocabulary size",
                "count": "hops of a repeat (eq. 41-42)", "axis": "a fixed axis length",
                "rate": "dropout probability (off in eval())"}


def plan_config(p) -> ConfigPlan:
    consts = dict(p.cs.spec.constants)
    syms = dict(p.cs.spec.const_syms)
    for name, v, s in p.m.consts:
        consts[name], syms[name] = v, s
    need = closure(p.used_cfg, syms)
    fields, props, tiny = [], [], {}
    roles = constant_roles(p.m)
    multiple = axis_multiples(p)
    lengths = example_lengths(p)
    short = {}  # a constant that fixes input axes -> their shortest example length
    for inp in p.m.inputs:
        for key, sym in inp.sym:
            if key.startswith("size:") and key[5:] in lengths:
                short[sym] = min(short.get(sym, lengths[key[5:]]), lengths[key[5:]])
    heads = [v for name, v in consts.items() if roles.get(name) == "heads"]
    for name, v in consts.items():
        if name not in need or isinstance(v, (bool, str)):
            continue
        typ = "int" if isinstance(v, int) else "float"
        if syms.get(name):
            props.append(ConfigProperty(name, typ, parse_sym(syms[name])))
            continue
        role = roles.get(name, "dim")
        fields.append(ConfigField(name, typ, repr(v), ROLE_COMMENT.get(role, "")))
        if typ == "int":
            small = {"heads": min(v, 4), "vocab": min(v, 50),
                     "axis": min(v, short.get(name, tiny_length(multiple.get(name, 1)))),
                     "count": min(v, 2), "capsules": v, "window": min(v, 2)}.get(role)
            if small is None:  # a feature size: 16, a multiple of the tiny head count
                small = min(v, 4 * max(min(h, 4) for h in heads) if heads else 16)
            if small != v:
                tiny[name] = small
    tiny = consistent_tiny(p, fields, props, tiny, roles)
    for axis, size in p.axis_fields.items():
        if axis in consts or any(f.name == axis for f in fields):
            continue
        step = multiple.get(axis, 1)
        fields.append(ConfigField(axis, "int", repr(size), f"length of axis {axis}" + (
            f", a multiple of {step} (down-sampled by {step})" if step > 1 else "")))
        if size > lengths.get(axis, tiny_length(step)):
            tiny[axis] = lengths.get(axis, tiny_length(step))
    if p.need_max_len:
        fields.append(ConfigField("max_len", "int", "512",
                                  "longest sequence for learned position embeddings"))
        tiny["max_len"] = 64
    checked = tuple((f.name, multiple[f.name]) for f in fields
                    if f.type == "int" and multiple.get(f.name, 1) > 1)
    return ConfigPlan(tuple(fields), tuple(props), tuple((k, str(v)) for k, v in tiny.items()),
                      checked)


def axis_multiples(p) -> dict[str, int]:
    """Axis (or the constant that fixes its length) -> the factor its grid is down-sampled
    by (``H/8`` somewhere: 8), which its length must stay a multiple of."""
    out: dict[str, int] = {}
    for base, _, den in p.cm.scaled.values():
        out[base] = math.lcm(out.get(base, 1), den)
    for inp in p.m.inputs:
        for key, sym in inp.sym:
            if key.startswith("size:") and key[5:] in out:
                out[sym] = math.lcm(out.get(sym, 1), out[key[5:]])
    return out


def tiny_length(multiple: int) -> int:
    """An axis length for Config.tiny(): 6, or the smallest multiple of ``multiple`` >= 6."""
    return -(-6 // multiple) * multiple


# positions of one example of an input at Config.tiny() (its axes' lengths multiplied): an
# input with many axes would otherwise ask for gigabytes (8 axes of 8 positions: 16 million)
EXAMPLE_POSITIONS = 4096
MASK_KINDS = ("mask", "graph")


def data_inputs(m: ir.Model) -> list[ir.Input]:
    """The inputs that hold data (not a mask or a graph over the others' axes)."""
    return [i for i in m.inputs if i.kind not in MASK_KINDS]


def fixed(m: ir.Model, inp: ir.Input, axis: str) -> tuple[ir.Input, int | None]:
    """The input that fixes ``axis``'s length (this one, or another with the same axis)."""
    for other in [inp, *m.inputs]:
        if axis in other.axes and other.sizes[other.axes.index(axis)] is not None:
            return other, other.sizes[other.axes.index(axis)]
    return inp, None


FREE_LENGTHS = (9, 7, 8, 6, 5)  # distinct, so that a mixed-up axis shows in a shape


def example_lengths(p) -> dict[str, int]:
    """Each data input axis's length in example_inputs() at Config.tiny(): a fixed axis its
    tiny length, a free axis one of ``FREE_LENGTHS``; then, input by input, the longest axis
    shortened (a fixed one by the multiple its grid needs, never below 2 or that multiple;
    the free ones after the fixed ones) until the input has at most ``EXAMPLE_POSITIONS``
    positions per example."""
    multiple = axis_multiples(p)
    lengths: dict[str, int] = {}
    steps: dict[str, int] = {}
    for inp in data_inputs(p.m):
        for ax in inp.axes:
            if ax in lengths:
                continue
            owner, size = fixed(p.m, inp, ax)
            if size is None:
                lengths[ax] = FREE_LENGTHS[sum(a not in steps for a in lengths)
                                           % len(FREE_LENGTHS)]
                continue
            sym = dict(owner.sym).get("size:" + ax)
            steps[ax] = multiple.get(sym if sym else ax, 1)
            lengths[ax] = min(size, tiny_length(steps[ax]))
    groups = [tuple(dict.fromkeys(i.axes)) for i in data_inputs(p.m)]
    for free in (False, True):  # the fixed axes first: Config.tiny() sets them
        for axes in groups:
            while math.prod(lengths[a] for a in axes) > EXAMPLE_POSITIONS:
                can = [a for a in axes if (a not in steps) == free and
                       lengths[a] - steps.get(a, 1) >= max(2, steps.get(a, 1))]
                if not can:
                    break
                a = max(can, key=lengths.__getitem__)
                lengths[a] -= steps.get(a, 1)
    return lengths


def closure(used: set[str], syms: dict[str, str | None]) -> set[str]:
    """The constants ``used`` names, and every constant they are derived from."""
    need, todo = set(used), list(used)
    while todo:
        s = syms.get(todo.pop())
        for dep in sym_names(s) if s else ():
            if dep not in need:
                need.add(dep)
                todo.append(dep)
    return need


def consistent_tiny(p, fields, props, tiny: dict[str, int], roles) -> dict[str, int]:
    """Shrink sizes for Config.tiny() only as far as the model stays consistent: a size
    tied to a literal in the spec (``bigru(x, 32)`` beside ``let d = 64``) keeps its value."""
    default = {f.name: (int(f.value) if f.type == "int" else float(f.value)) for f in fields}

    def ok(values: dict) -> bool:
        env = dict(values)
        try:
            for prop in props:  # derived constants, in definition order
                env[prop.name] = prop.expr.value(env)
            return all(a.expr().value(env) == b.expr().value(env) for a, b in p.equal) \
                and all(d.expr().value(env) % size_value(h, env) == 0 for d, h in p.divides
                        if h)
        except (ValueError, KeyError, ZeroDivisionError):
            return False

    # first all sizes; then leave feature sizes (and then heads) at their defaults
    proposals = [tiny, {k: v for k, v in tiny.items() if roles.get(k, "dim") != "dim"}]
    proposals.append({k: v for k, v in proposals[1].items() if roles.get(k) != "heads"})
    for prop in proposals:
        if ok(default | prop):
            return prop
    return {}


def size_value(x: "Dim | int", env: dict) -> int | float:
    """A divisor's value: a size or a literal."""
    return x.expr().value(env) if isinstance(x, Dim) else x


def constant_roles(m: ir.Model) -> dict[str, str]:
    """What each constant sizes, to pick toy sizes for Config.tiny()."""
    out: dict[str, str] = {}

    def mark(sym: str | None, role: str) -> None:
        if sym and NAME.fullmatch(sym):
            out.setdefault(sym, role)

    for n in m.nodes:
        s = dict(getattr(n, "sym", ()))
        if isinstance(n, ir.Input):
            mark(s.get("vocab"), "vocab")
            for k, v in s.items():
                if k.startswith("size:"):
                    mark(v, "axis")
        h = getattr(n, "hop", None)
        if h is not None and h.count_sym:
            mark(h.count_sym, "count")
        for e in (getattr(n, a, None) for a in ("expr", "query", "keys", "values")):
            stack = [e]
            while stack:
                x = stack.pop()
                if isinstance(x, ir.Op):
                    if x.fn == "dropout":
                        mark(dict(x.sym).get("p"), "rate")
                    elif x.param("dropout") is not None:  # between a stacked RNN's layers
                        mark(dict(x.sym).get("dropout"), "rate")
                    stack.extend(x.args)
        if isinstance(n, ir.Attention):
            mark(s.get("dropout"), "rate")
            mark(s.get("heads"), "heads")
            mark(s.get("capsules"), "capsules")
            mark(dict(n.align.sym).get("D"), "window")
    return out
