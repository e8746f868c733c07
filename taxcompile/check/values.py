"""Shapes of the operators that read attention modules or relate two inputs: an attention
module's weights as a feature (``att.weights``, ``context(v, w)``), a pointer network's
decoder input (``pointed``), learned vectors, the output layer and affinity matrices
(eq. 12-13). Like ``features``, each is an operator's shape rule (``ops.shape_rule``)."""

from __future__ import annotations

from .. import ir, ops
from .. import mechanisms as mech
from ..diagnostics import article
from ..shapes import learned_axis
from .core import Shape, _name


def not_distribution(n: ir.Attention) -> str:
    """Why the weights of ``n`` are no distribution over the keys, from its alignment's and
    head mechanisms' records ("" where they are one)."""
    recs = [(mech.ALIGNS[n.align.fn], n.align)] + [(m.record, m) for m in n.head_mechanisms]
    return next((why for rec, obj in recs if (why := rec.text("not_distribution", obj))), "")


class ValueShapes:
    """The shape rules of ``weights``, ``context``, ``pointed``, ``learned``, ``classify``
    and ``affinity``."""

    def weights_of(self, e: ir.Op) -> ir.Attention | None:
        """The module of ``att.weights``, when its weights can be read as a feature."""
        ref = e.args[0]
        n = self.cm.model.node(ref.node)
        if not isinstance(n, ir.Attention):
            what = "an input" if isinstance(n, ir.Input) else f"{article(n.kind_)} {n.kind_}"
            self.err(e.loc, f"`{n.name if hasattr(n, 'name') else n.id}.weights`: "
                     f"`{ref.node}` is {what}, not an attention module, so it has no "
                     "attention weights", "`.weights` reads the weights a_l (eq. 3) of an "
                     "`attention` statement")
            return None
        why = ("a multi-dimensional module has a weight per feature (eq. 30-32), not one per "
               "key" if n.dimensionality == "multi" else
               "a capsule module's weights are per class (eq. 43-45)" if n.capsules else
               not_distribution(n) or
               ("graph attention's weights are one per edge and head, (E, H), not a dense "
                "(N, N) matrix (its sparse path never builds one)" if n.mask_input is not None
                and self.cm.model.node(n.mask_input).kind == "graph" else None))
        if why:
            self.err(e.loc, f"`{n.name}.weights`: {why}, so they are not a distribution "
                     "over the keys' positions", "read the weights of a single-dimensional "
                     "module that normalises over its keys")
            return None
        if n.hop is not None or any(n.id in comp for comp in self.cm.steps.values()):
            self.err(e.loc, f"`{n.name}.weights`: `{n.name}` runs once per hop of a `repeat` "
                     "or step of a decoder loop, and its weights exist only inside it",
                     "read the weights of a module outside `repeat` blocks and decoder steps")
            return None
        return n

    @ops.shape_rule("weights")
    def shape_weights(self, e, a, nid):
        """(…, Lq, |Lk|): the context's positions, one feature per key position (the
        weights, averaged over heads)."""
        n = self.weights_of(e)
        if n is None:
            return None
        info = self.cm.attention[n.id]
        size = self.cm.sizes.get(info.attended)
        if size is None:
            self.err(e.loc, f"`{n.name}.weights` has one feature per position of axis "
                     f"`{info.attended}`, whose length is not fixed",
                     f"fix it where the input is declared, e.g. `({info.attended} = 50)`; "
                     "padding masks still leave out the positions past each example's length")
            return None
        return Shape(a[0].axes, size)

    @ops.shape_rule("context")
    def shape_context(self, e, a, nid):
        """A V: values V (…, Lk, d) weighted by A (…, [Lq,] |Lk|) -> (…, [Lq,] d)."""
        v, w = a
        if not v.axes:
            self.err(e.args[0].loc, f"`context` sums the values over their positions, but "
                     f"`{_name(e.args[0])}` is a single vector {v}")
            return None
        attended, groups = v.axes[-1], v.axes[:-1]
        size = self.cm.sizes.get(attended)
        if size is None or w.dim != size or w.axes[:len(groups)] != groups \
                or len(w.axes) > len(groups) + 1 or attended in w.axes:
            self.err(e.loc, f"`context({_name(e.args[0])}, {_name(e.args[1])})`: the weights "
                     f"{w} do not weigh the values {v} over axis `{attended}`",
                     (f"the weights start with the values' other axes {', '.join(groups)}, "
                      if groups else "the weights have ")
                     + "at most one axis of queries and one feature per position of "
                     f"`{attended}` ({size if size is not None else 'which needs a fixed length'}"
                     "), e.g. `context(v, att.weights)` with `att` over v's positions")
            return None
        return Shape(w.axes, v.dim)

    @ops.shape_rule("pointed")
    def shape_pointed(self, e, a, nid):
        """X at the previous target pointer: (…, S, d) and pointers (T,) into S -> (T, d)
        (a pointer network's decoder input, Vinyals et al. 2015)."""
        c = e.args[1]
        inp = self.cm.model.by_id.get(c.node) if isinstance(c, ir.Ref) else None
        if not (isinstance(inp, ir.Input) and inp.kind == "pointers"):
            self.err(c.loc, f"`pointed` reads positions from a pointers input, but "
                     f"`{_name(c)}` is not one", "declare `input C: pointers[T] (into = S)`")
            return None
        x = a[0]
        if x.axes != (inp.into,):
            self.err(e.loc, f"`pointed({_name(e.args[0])}, {inp.id})`: `{inp.id}` points into "
                     f"axis `{inp.into}`, but `{_name(e.args[0])}` has {x}",
                     f"take the vectors of one sequence over `{inp.into}`, e.g. the input "
                     "the encoder reads")
            return None
        return Shape(inp.axes, x.dim)

    @ops.shape_rule("learned")
    def shape_learned(self, e, a, nid):
        """learned(d): one vector (d); learned(K, d): K of them over an axis of their own,
        ``NODE.K``, K long and never masked: (K, d)."""
        if e.param("n") is None:
            return Shape((), int(e.param("d")))
        axis = learned_axis(self.cm.model.by_id[nid], e)
        self.cm.sizes[axis] = int(e.param("n"))
        self.cm.axis_origin[axis] = nid
        return Shape((axis,), int(e.param("d")))

    @ops.shape_rule("classify")
    def shape_classify(self, e, a, nid):
        return Shape(a[0].axes, int(e.param("classes")))

    def affinity(self, n: ir.Node) -> Shape | None:
        e = n.expr
        assert isinstance(e, ir.Op)
        a = [self.shape(x, n.id) for x in e.args]
        if any(s is None for s in a):
            return None
        return self.affinity_shape(e, a)

    @ops.shape_rule("affinity")
    def shape_affinity(self, e, a, nid):
        return self.affinity_shape(e, a)

    def affinity_shape(self, e: ir.Op, a: list[Shape]) -> Shape | None:
        s1, s2 = a
        if not s1.axes or not s2.axes:
            self.err(e.loc, "an affinity matrix relates two sets of feature vectors (eq. 12); "
                     f"got {s1} and {s2}")
            return None
        if s1.axes[:-1] != s2.axes[:-1]:
            self.err(e.loc, f"affinity operands must share their group axes: {s1} vs {s2}")
            return None
        if s1.axes[-1] == s2.axes[-1]:
            self.err(e.loc, "an affinity matrix relates two different inputs; both operands "
                     f"run over `{s1.axes[-1]}`", "for relations within one input use "
                     "self-attention (`query = project(F)`)")
            return None
        form = e.param("form", "bilinear")
        if form in mech.scores.AFFINITY_EQUAL_WIDTH and s1.dim != s2.dim:
            self.err(e.loc, f"the {form} affinity needs equal feature sizes (eq. 13); "
                     f"got {s1.dim} and {s2.dim}", "use `form = bilinear` (eq. 12) or project "
                     "one side")
            return None
        return Shape(s1.axes + (s2.axes[-1],), None)
