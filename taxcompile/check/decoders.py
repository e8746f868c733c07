"""Decoders: a recurrent model run step by step (``lstm``/``gru`` with ``feed =``), its
initial state (``init``, ``init_c``, or an encoder's final states), ``prev(…)`` reads of
the previous step, and what the decoder's step-by-step loop cannot compute (an attention
over the decoder's own axis, ops that mix its positions). Run after every shape is known."""

from __future__ import annotations

from .. import ir
from . import prev_reads
from .. import mechanisms as mech
from .core import Shape, _base_ref, decoder_ops


class DecoderChecks:
    """``check_feed``, ``check_init``, ``check_prev`` and ``check_feed_loop``."""

    def check_feed(self, n: ir.AnyNode) -> None:
        """A recurrent decoder runs over an autoregressive axis, reads a node of its own
        step, and starts from a state of its width."""
        for e in decoder_ops(n):
            if e.fn not in ("lstm", "gru") or not e.args:
                continue
            s = self.cm.shapes.get(_base_ref(e.args[0]) or "")
            axis = s.axes[-1] if s and s.axes else None
            origin = self.cm.model.node(self.cm.axis_origin[axis]) if axis in \
                self.cm.axis_origin else None
            if s is not None and len(s.axes) != 1:
                self.err(e.loc, "`feed` runs a decoder step by step over one sequence; "
                         f"its input has axes {s}", "feed a decoder over a "
                         "`tokens[T]` or `sequence[T, d]` input")
                continue
            if not (isinstance(origin, ir.Input) and origin.autoregressive):
                self.err(e.loc, "`feed` makes a decoder read its previous context, so the "
                         "recurrent model must run over an autoregressive input",
                         "declare the target input with `(…, autoregressive)`")
                continue
            if e is not n.expr:
                self.err(e.loc, "a decoder with `feed` is a statement of its own",
                         f"write `{n.kind_} {n.name} = {e.fn}(…, feed = {e.param('feed')})` and "
                         f"build on `{n.name}` in other statements")
                continue
            fed = str(e.param("feed"))
            step = self.cm.steps.get(n.id, set())
            if fed not in step or fed == n.id:
                self.err(e.loc, f"`feed = {fed}`: `{fed}` is not computed in the steps of the "
                         f"decoder `{n.name}`: it does not depend on `{n.name}`",
                         f"feed a node computed from `{n.name}` in each step (an attention "
                         f"queried by `{n.name}`, Luong's h̃), or query the attention with "
                         f"`prev({n.name})` and feed its context (Bahdanau's c_i)")
                continue
            fs = self.cm.shapes.get(fed)
            if fs is not None and fs.axes != s.axes:
                self.err(e.loc, f"`feed = {fed}`: the decoder reads one vector of `{fed}` per "
                         f"step, but it has shape {fs}", "feed a node with one vector per "
                         f"position of `{axis}`")
            self.check_init(n, e, s)

    def check_encoder_init(self, n: ir.AnyNode, e: ir.Op) -> None:
        """``init = ENCODER`` on an ``lstm``/``gru`` run over its whole input at once (a
        decoder without ``feed``, e.g. a pointer network's, Vinyals et al. 2015): it starts
        from the encoder's final states, layer by layer. Other initial states belong to a
        decoder run step by step."""
        init = e.param("init")
        src = self.cm.model.by_id.get(str(init)) if init is not None else None
        encoder = isinstance(src, ir.Node) and isinstance(src.expr, ir.Op) and \
            src.expr.fn in ("lstm", "gru")
        if e.fn not in ("lstm", "gru") or not encoder or e.param("init_c"):
            self.err(e.loc, "without `feed`, `init` names an encoder `lstm`/`gru` whose final "
                     "states start this RNN; other initial states (`init = s0`, `init_c`) "
                     "belong to a decoder run step by step with `feed = …`",
                     "e.g. `lstm(x, 256, init = enc)` with `feature enc = lstm(src, 256)`")
            return
        x = self.cm.shapes.get(n.id)
        if x is not None and len(x.axes) != 1:
            self.err(e.loc, f"`init = {init}` starts one sequence per example, but this RNN's "
                     f"output {x} has several axes", "run it over one sequence per example")
            return
        self.check_init(n, e, x)

    def check_init(self, n: ir.Node, e: ir.Op, x: Shape) -> None:
        """``init``: a vector per example of the decoder's width (h_0; ``init_c`` c_0), or an
        encoder LSTM/GRU whose final states start the decoder layer by layer."""
        hidden, layers = int(e.param("hidden")), int(e.param("layers", 1))
        init, init_c = e.param("init"), e.param("init_c")
        step = self.cm.steps.get(n.id, set())
        for key, ref in (("init", init), ("init_c", init_c)):
            if ref is not None and str(ref) in step:
                self.err(e.loc, f"`{key} = {ref}` is computed in the decoder's steps; the "
                         "initial state comes before the first step",
                         "start from the encoder, e.g. `init = s0` with "
                         "`feature s0 = linear(first(backward(h)), …)`")
                return
        if init_c is not None and (e.fn != "lstm" or init is None):
            self.err(e.loc, "`init_c` gives an LSTM's initial memory c_0 beside `init` (h_0)"
                     if e.fn == "lstm" else "`init_c` gives an LSTM's memory c_0; a GRU has "
                     "only the state `init` sets", "give `init = H0, init_c = C0`"
                     if e.fn == "lstm" else "drop `init_c`")
            return
        if init is None:
            return
        src = self.cm.model.node(str(init))
        enc = src.expr if isinstance(src, ir.Node) and isinstance(src.expr, ir.Op) and \
            src.expr.fn in ("lstm", "gru", "bilstm", "bigru") else None
        if enc is not None:
            want = f"{e.fn}(…, {hidden}, layers = {layers})"
            if enc.fn != e.fn or enc.param("feed") or int(enc.param("hidden")) != hidden or \
                    int(enc.param("layers", 1)) != layers:
                self.err(e.loc, f"`init = {init}` starts the decoder from the final states of "
                         f"`{init}`, layer by layer, so `{init}` must be `{want}` too",
                         "or give one vector per example, e.g. `init = s0` with `feature s0 = "
                         f"linear(first(backward(h)), {hidden}, act = tanh)`" if layers == 1
                         else f"give the encoder the decoder's kind, size and layers: {want}")
                return
            es = self.cm.shapes.get(str(init))
            if es is not None and len(es.axes) != 1:
                self.err(e.loc, f"`init = {init}`: the final states of `{init}` {es} are one "
                         "per group, not one per example", "start from an encoder over one "
                         "sequence per example")
                return
            if init_c is not None:
                self.err(e.loc, f"`init = {init}` gives the encoder's final memory too",
                         "drop `init_c`")
            return
        if layers != 1:
            self.err(e.loc, f"`init = {init}` gives one state vector, but the decoder has "
                     f"{layers} layers", "start a stacked decoder from an encoder with as many "
                     f"layers (`init = ENCODER`), whose final states it takes layer by layer")
            return
        for key, ref in (("init", init), ("init_c", init_c)):
            rs = self.cm.shapes.get(str(ref)) if ref is not None else None
            if rs is not None and (rs.axes or rs.dim != hidden):
                self.err(e.loc, f"`{key} = {ref}` has shape {rs}, but the decoder's initial "
                         f"{'state' if key == 'init' else 'memory'} is one vector of "
                         f"hidden = {hidden} per example", f"map it to the decoder's width, "
                         f"e.g. `linear(first(…), {hidden}, act = tanh)`; pool a sequence "
                         "with `mean(…)` or `first(…)`")
                return

    def check_prev(self, n: ir.AnyNode) -> None:
        """``prev(x)`` reads x at the previous step of the decoder that computes both x and
        the node reading it; ``init`` belongs to a decoder."""
        stack = [e for e in ([n.expr] if isinstance(n, ir.Node) else
                             [n.query, n.keys, n.values] if isinstance(n, ir.Attention) else [])
                 if e is not None]
        while stack:
            e = stack.pop()
            if not isinstance(e, ir.Op):
                continue
            stack.extend(e.args)
            if (e.param("init") or e.param("init_c")) and not e.param("feed") and \
                    not e.param("state"):  # (state: check_state says it)
                self.check_encoder_init(n, e)
            if e.fn != "prev" or not e.args or not isinstance(e.args[0], ir.Ref):
                continue
            x = e.args[0].node
            homes = [d for d, step in self.cm.steps.items() if x in step]
            if not homes:
                self.err(e.loc, f"`prev({x})` reads `{x}` at the previous decoder step, but "
                         f"`{x}` is not computed step by step by a decoder",
                         "`prev` reads a node of a recurrent decoder's step "
                         "(`gru(…, feed = …)`), e.g. Bahdanau's `query = prev(s)`")
            elif other := prev_reads.in_other_step(self.cm.steps, x, n.id):
                self.err(e.loc, f"`prev({x})` is read by `{n.id}`, which runs in the steps "
                         f"of another decoder, `{other}`: a decoder's step reads another "
                         "decoder's steps only as whole sequences",
                         f"read `prev({x})` in the steps of `{homes[0]}`, or after them "
                         "(an output over all steps)")
            elif n.id in homes:
                self.err(e.loc, f"the decoder `{n.id}` reads its inputs for all steps at once; "
                         f"`prev({x})` cannot be one of them", f"give it to the decoder "
                         "through `feed = NODE`")

    # What runs inside a decoder loop must act on one step at a time: the ops that mix the
    # positions of their input's last axis, and what they do (for messages).
    STEP_MIXING = {"lstm": "runs", "gru": "runs", "bilstm": "runs", "bigru": "runs",
                   "cnn": "convolves", "positional": "encodes positions",
                   "positions": "encodes positions", "location": "weighs positions",
                   "mean": "pools",
                   "max": "pools", "sum": "pools", "prepend": "prepends"}

    def check_feed_loop(self, n: ir.AnyNode) -> None:
        """``feed = ATT`` runs the recurrent model R one step at a time, and with it every
        node between R and ATT (codegen's decoder loop): there only the current step of R's
        axis exists. Refuse what would need the other steps: an attention over that axis
        (attention inside a recurrence, e.g. LSTMN's intra-attention over the decoder's own
        outputs, or over its inputs), and ops that mix positions along it."""
        fed = None
        stack = [n.expr] if isinstance(n, ir.Node) else []
        while stack:
            e = stack.pop()
            if isinstance(e, ir.Op):
                if e.param("feed") or e.param("state"):
                    fed = e
                stack.extend(e.args)
        if fed is None:
            return
        # `state = ATT` (check/recurrence.py): ATT attends over the RNN's earlier states
        own = str(fed.param("state")) if fed.param("state") else None
        att = own or str(fed.param("feed"))
        axis = self.shape(fed.args[0], n.id).axes[-1]
        ctx = self.cm.shapes[att]
        if ctx.axes != (axis,):
            self.err(fed.loc, f"`feed = {att}` reads the previous step's context, one vector per "
                     f"step of `{axis}`, but the context of `{att}` is {ctx}",
                     f"a context that does not change with the steps is an input: "
                     f"`{fed.fn}(concat(x, {att}), …)`" if axis not in ctx.axes else
                     "feed a module whose query is the decoder state, one per step")
            return
        region = self.cm.steps.get(n.id, {n.id, att})
        where = (f"the steps of decoder `{n.id}`, but it runs inside that decoder's "
                 f"step-by-step loop (`{'state' if own else 'feed'} = {att}`), where only the "
                 "current step exists")
        for node_id in self.cm.order:
            if node_id not in region:
                continue
            x = self.cm.model.node(node_id)
            if isinstance(x, ir.Attention):
                k = self.shape(x.keys, node_id)
                if node_id == own:
                    exprs = [x.query] if x.query is not None else []
                elif k.axes[-1] == axis:
                    self.err(x.keys.loc, f"attention `{x.name}` attends over `{axis}`, {where}",
                             "attention inside a recurrence (LSTMN-style intra-attention) is "
                             "not supported yet: attend over another input's features, or drop "
                             "`feed` and attend over the decoder's outputs once it has run "
                             "(`mask = causal`)")
                    return
                q = self.shape(x.query, node_id) if x.query is not None else None
                if x.affinity and mech.SCORES[x.score.fn].affinity == "pooled" and q is not None \
                        and q.axes[-1:] == (axis,):
                    self.err(x.loc, f"attention `{x.name}` sums its affinity over the query's "
                             f"positions (eq. 14-16), `{axis}`, {where}",
                             "use `score = affinity` (one context per query position)")
                    return
                else:
                    exprs = [e for e in (x.query, x.keys, x.values) if e is not None]
            else:
                exprs = [x.expr]
            for e in exprs:
                if self.feed_loop_op(e, node_id, fed, axis, where):
                    return
        fa = self.cm.model.node(att)
        inside = [r for r in ir.refs(fa.values) if r in region] \
            if isinstance(fa, ir.Attention) and not own else []
        if inside:  # codegen sizes the fed context from the values before the loop
            self.err(fa.values.loc, f"the values of `{fa.name}` are built from decoder "
                     f"`{n.id}` (through `{inside[0]}`), which reads their context a step later "
                     f"(`feed = {att}`)", "attention inside a recurrence is not supported yet: "
                     "attend over features computed without the decoder")

    def feed_loop_op(self, e: ir.Expr, node_id: str, fed: ir.Op, axis: str, where: str) -> bool:
        """Report the first op of ``e`` (outside the fed op's input, which runs before the
        loop) that needs other steps of ``axis`` than the current one."""
        if isinstance(e, ir.Ref) or e is fed:
            return False
        a = [self.shape(x, node_id) for x in e.args]
        what = None
        if e.fn in self.STEP_MIXING and a[0].axes[-1:] == (axis,):
            what = self.STEP_MIXING[e.fn]
        elif e.fn == "flatten" and axis in a[0].axes[-2:]:
            what = "merges axes"
        elif e.fn == "resize" and any(axis in s.axes for s in a):
            what = "resizes positions"
        elif e.fn == "affinity" and a[1].axes[-1:] == (axis,):
            what = "relates positions"
        if what is not None:
            self.err(e.loc, f"`{e.fn}` {what} over `{axis}`, {where}",
                     "compute it outside the loop: from the decoder's input, or from the "
                     "decoder's outputs in a node that "
                     f"`{fed.param('feed') or fed.param('state')}` does not read")
            return True
        return any(self.feed_loop_op(x, node_id, fed, axis, where) for x in e.args)
