"""Stage 6: the survey's eight dimensions (Table III), derived from a model's graph.

Score, alignment and dimensionality are read off each attention module. Feature
multiplicity, levels, representations, query type and query multiplicity come from
the wiring: where each module's query, keys and values come from. No spec field
states a Table III cell. Every value carries a rationale naming the nodes."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import digraph, feature_dimensions, ir, mechanisms
from .checks import CheckedModel, weights_read
from .graph import dataflow_of, edges

DIMENSIONS = ("feature_multiplicity", "feature_levels", "feature_representations", "scoring",
              "alignment", "dimensionality", "query_type", "query_multiplicity")

# Canonical order of values inside a cell (the survey's Fig. 3 order).
ORDER = {
    "feature_multiplicity": ("Singular", "Alternating Co-attention", "Interactive Co-attention",
                             "Parallel Co-attention", "Multi-Grained Co-attention", "Rotatory"),
    "feature_levels": ("Single-Level", "Attention-via-Attention", "Hierarchical"),
    "feature_representations": ("Single-Representational", "Multi-Representational"),
    "scoring": ("Additive", "Multiplicative", "Scaled Multiplicative", "General", "Biased General",
                "Activated General", "Similarity", "Location"),
    "alignment": ("Global", "Soft", "Hard", "Local", "Reinforced", "Sparse"),
    "dimensionality": ("Single-Dimensional", "Multi-Dimensional"),
    "query_type": ("Self-Attentive", "Specialized", "Basic"),
    "query_multiplicity": ("Singular", "Multi-Head", "Multi-Hop", "Capsule-Based"),
}

# A score's and an alignment's Table III value and the reason text come from their records
# (taxcompile/mechanisms). See et al.'s coverage (`coverage = true`, eq. 10-11) adds w_c
# c_i^t to an additive score's inputs: the score stays Additive (its form w^T act(W1 q + W2
# k + ... + b) is unchanged) and the coverage, the module's own earlier weights, is no
# query. A penalty (Lin et al., Xu et al.'s doubly stochastic, See et al.'s coverage loss,
# Li et al.'s disagreement) is a term of the training loss: it changes no module's score,
# alignment, wiring or heads, so it changes no cell of the row.


READINGS = ("table", "text")


@dataclass
class Cell:
    values: dict[str, list[str]] = field(default_factory=dict)  # value -> reasons
    notes: list[str] = field(default_factory=list)  # where the survey allows two readings

    def add(self, value: str, reason: str) -> None:
        reasons = self.values.setdefault(value, [])
        if reason not in reasons:
            reasons.append(reason)

    def labels(self, dim: str) -> list[str]:
        return [v for v in ORDER[dim] if v in self.values]

    def text(self, dim: str) -> str:
        return " + ".join(self.labels(dim))


@dataclass
class Classification:
    model: str
    cells: dict[str, Cell]

    def row(self) -> dict[str, str]:
        return {d: self.cells[d].text(d) for d in DIMENSIONS}

    def _repr_markdown_(self) -> str:  # Jupyter: the row with its reasons
        from .table import classification_md
        return classification_md([self], f"model {self.model}")


def modifier_reading(a: ir.Attention) -> str:
    """The reason's tail for a module with score modifiers, '' without any: a position term
    or bias added to a score leaves its family (the survey's Table II) and the alignment as
    they are; it is noted, not a new category (each record's reason)."""
    mods = mechanisms.modifiers(a)
    if not mods:
        return ""
    return "; " + "; ".join(rec.text("reason", m) for rec, m in mods)


def display(m: ir.Model, node_id: str) -> str:
    """How rationales name a node: hops by their template (`decoder.cross`), updated
    features by their name (`x`), so a 6-layer stack gives one line, not six."""
    try:
        n = m.node(node_id)
    except KeyError:
        return node_id
    if "@" in node_id:
        return node_id.split("@")[0]
    if getattr(n, "hop", None) is not None:
        return n.hop.template
    return node_id


class Classifier:
    def q(self, node_id: str) -> str:
        return f"`{display(self.m, node_id)}`"

    def __init__(self, cm: CheckedModel, reading: str = "table"):
        assert reading in READINGS, reading
        self.reading = reading
        self.cm = cm
        self.m = cm.model
        self.dag = dataflow_of(cm)  # the model graph without delayed edges (a DAG)
        self.atts = [n for n in self.m.nodes if isinstance(n, ir.Attention)]
        self.cells = {d: Cell() for d in DIMENSIONS}
        self._anc: dict[str, set[str]] = {}
        self._roots: dict[str, set[str]] = {}
        self._attended: set[str] | None = None

    # ---- graph helpers -------------------------------------------------------------

    def ancestors(self, node_id: str) -> set[str]:
        if node_id not in self._anc:
            self._anc[node_id] = digraph.ancestors(self.dag, node_id)
        return self._anc[node_id]

    def expr_ancestors(self, e: ir.Expr | None) -> set[str]:
        out: set[str] = set()
        for r in ir.refs(e) if e is not None else ():
            out.add(r)
            out |= self.ancestors(r)
        return out

    def is_input(self, node_id: str, autoregressive: bool | None = None) -> bool:
        n = self.m.node(node_id)
        return isinstance(n, ir.Input) and (autoregressive is None or n.autoregressive == autoregressive)

    def feature_roots(self, e: ir.Expr | None) -> set[str]:
        """Inputs whose features ``e`` carries. A context stands for the features it
        summarises (its keys); a context added to a stream (eq. 37) updates the stream
        and does not change what it represents."""
        if e is None:
            return set()
        if isinstance(e, ir.Ref):
            return self._node_roots(e.node)
        args = list(e.args)
        if e.fn == "add":
            stream = [a for a in args if not self._is_context(a)]
            # a stream of learned vectors (latents, inducing points: no input's features)
            # with a context added carries what the context summarises
            if stream and (roots := set().union(*map(self.feature_roots, stream))):
                return roots
        out: set[str] = set()
        for a in args:
            out |= self.feature_roots(a)
        return out

    def _node_roots(self, node_id: str) -> set[str]:
        if node_id not in self._roots:
            n = self.m.node(node_id)
            if isinstance(n, ir.Input):
                # views of one input's data (its words, its characters) share a root
                while n.view_of is not None:
                    n = self.m.node(n.view_of)
                self._roots[node_id] = {n.id}
            else:  # the dataflow is acyclic (checks.py), so this recursion ends
                self._roots[node_id] = self.feature_roots(
                    n.keys if isinstance(n, ir.Attention) else n.expr)
        return self._roots[node_id]

    def _is_context(self, e: ir.Expr) -> bool:
        if isinstance(e, ir.Op) and e.fn in ("dropout", "mul"):
            # dropout of a context (residual), a gated context (g * c: a gate scales the
            # context after the alignment and does not change what it represents)
            return any(self._is_context(a) for a in e.args)
        return isinstance(e, ir.Ref) and isinstance(self.m.node(e.node), ir.Attention)

    def keys_base(self, a: ir.Attention) -> set[str]:
        return set(ir.refs(a.keys)) | set(ir.refs(a.values))

    # ---- query provenance (3.3.1) --------------------------------------------------

    def query_sources(self, a: ir.Attention) -> dict[str, list[tuple[str, str | None]]]:
        """Type -> [(reason, partner input or None)] for module ``a``'s query."""
        out: dict[str, list[tuple[str, str | None]]] = {}
        key_roots = self.feature_roots(a.keys)
        base = self.keys_base(a)
        attended_inputs = self.attended_inputs()
        name = self.q(a.id)

        def add(kind: str, reason: str, partner: str | None = None) -> None:
            out.setdefault(kind, [])
            if (reason, partner) not in out[kind]:
                out[kind].append((reason, partner))

        if a.query is None:
            add("Self-Attentive", f"{name} has no query: it scores its features alone (eq. 33)")
            return out
        seen: set[str] = set()

        def visit(e: ir.Expr) -> None:
            if isinstance(e, ir.Op):
                if e.fn == "learned":  # a parameter, not an input: Self-Attentive (eq. 34)
                    k = e.param("n")
                    add("Self-Attentive", f"the query of {name} is " + (
                        "a learned vector" if k is None else
                        f"a learned query set of {k} vector{'s' if k > 1 else ''}") + " (eq. 34)")
                    return
                if e.fn == "pointed":  # a pointer network's decoder reads its own outputs
                    add("Basic", f"the query of {name} comes from a decoder that reads its "
                        f"previous outputs, the inputs at the target pointers "
                        f"{self.q(e.args[1].node)} (Vinyals et al.)")
                    return
                args = list(e.args)
                if e.fn == "add":
                    args = [x for x in args if not self._is_context(x)] or args
                for x in args:
                    visit(x)
                return
            node_id = e.node
            if node_id in seen:
                return
            seen.add(node_id)
            n = self.m.node(node_id)
            if node_id == a.id:  # prev(a): h~_(t-1), a weighted sum of the states it attends over
                add("Self-Attentive", f"the query of {name} reads its own previous context, "
                    "a summary of the states it attends over (LSTMN intra-attention, eq. 4)")
            elif node_id in base:
                add("Self-Attentive", f"the query of {name} is computed from {self.q(node_id)}, "
                    "the features it attends over (eq. 35)" + (mechanisms.TRAITS[
                        "segment_memory"].text("reason", a.memory) if a.memory else ""))
            elif isinstance(n, ir.Attention):
                partners = self.feature_roots(n.keys) - key_roots
                add("Specialized", f"the query of {name} is built from the context of "
                    f"attention {self.q(node_id)}", next(iter(sorted(partners)), None))
            elif isinstance(n, ir.Input):
                if n.autoregressive:
                    add("Basic", f"the query of {name} comes from the decoder's own input "
                        f"{self.q(node_id)}")
                elif self._node_roots(node_id) & key_roots:
                    add("Self-Attentive", f"the query of {name} is derived from "
                        f"{self.q(node_id)}, the input its keys come from")
                elif self._node_roots(node_id) & attended_inputs:
                    (root,) = self._node_roots(node_id)
                    add("Specialized", f"the query of {name} is built from {self.q(node_id)}, "
                        "another input that the model attends over", root)
                else:
                    add("Basic", f"the query of {name} comes from the auxiliary input "
                        f"{self.q(node_id)}")
            else:
                visit(n.expr)

        visit(a.query)
        del visit  # a recursive closure is a cycle: it would keep the IR for the collector
        return out

    def attended_inputs(self) -> set[str]:
        """Non-autoregressive inputs some module attends over."""
        if self._attended is None:
            self._attended = set()
            for a in self.atts:
                self._attended |= {r for r in self.feature_roots(a.keys) if self.is_input(r, False)}
        return self._attended

    # ---- dimensions -----------------------------------------------------------------

    def listing(self, items: list[str]) -> str:
        shown = ", ".join(items[:3])
        return shown + (f" and {len(items) - 3} more" if len(items) > 3 else "")

    def modules_over(self) -> str:
        """`att` over `src`, … : what each module attends over (for default values)."""
        seen: list[str] = []
        for a in self.atts:
            roots = ", ".join(self.q(r) for r in sorted(self.feature_roots(a.keys)))
            item = f"{self.q(a.id)} over {roots or 'learned features'}"
            if item not in seen:
                seen.append(item)
        return self.listing(seen)

    def run(self) -> Classification:
        self.per_module()
        self.query_type_and_multiplicity()
        feature_dimensions.multiplicity(self)
        feature_dimensions.levels(self)
        feature_dimensions.representations(self)
        return Classification(self.m.name, self.cells)

    def per_module(self) -> None:
        read = weights_read(self.m)
        for a in self.atts:
            self.scoring(a)
            al = a.align
            rec = mechanisms.align(al.fn)
            what = rec.text("reason", al)
            mi = self.m.node(a.mask_input) if a.mask_input else None
            if mi is not None and mi.kind == "graph":
                # GAT (eq. 3): a softmax over each node's neighbours. The survey's global
                # alignment weighs every key the query may see; here those are the neighbours
                what = mechanisms.GRAPH_REASON.format(graph=self.q(mi.id))
            elif mi is not None:
                what += f", the keys mask {self.q(mi.id)} leaves out (given with the data)"
            label = rec.text("reading", al)
            self.cells["alignment"].add(label, f"attention {self.q(a.id)}: {what}")
            if a.id in read:
                # `att.weights` read by a feature model (AoA's alpha^T beta-bar, a pointer
                # network's output, a supervised alignment): what reads them comes after
                # the alignment, so the module's own row stays as it is
                self.cells["alignment"].add(
                    label, f"the weights of {self.q(a.id)} are read as values "
                    f"(`{a.name}.weights`), after its alignment: its row stays as it is")
            for pen, m in mechanisms.penalties(a):
                if pen.target:
                    # a loss term on the weights in training (Liu et al. 2016): the weights
                    # are computed as before, so the row stays as it is
                    self.cells["alignment"].add(
                        label, f"attention {self.q(a.id)} is supervised by the target "
                        f"alignment {self.q(m.param(pen.target))} (a loss term on its weights "
                        "in training): its row stays as it is")
            if a.dimensionality == "multi":
                self.cells["dimensionality"].add(
                    "Multi-Dimensional", f"attention {self.q(a.id)} weighs every feature of each "
                    "value (eq. 30-32)")
            else:
                self.cells["dimensionality"].add(
                    "Single-Dimensional", f"attention {self.q(a.id)} gives one weight per value")

    def scoring(self, a: ir.Attention) -> None:
        """The score's Table III value (its record's reading; over an affinity matrix, the
        affinity's form) and why."""
        s, rec = a.score, mechanisms.score(a.score.fn)
        more = {}
        if a.affinity is not None:
            aff = self.m.node(a.affinity).expr
            more = dict(form=aff.param("form", "bilinear"), act=str(aff.param("act", "none")),
                        affinity=self.q(a.affinity))
        reading, qk, why = rec.text("reading", s, **more), a.qk_norm, ""
        if qk is not None:  # q and k normalised first may make it another score (a cosine)
            why = qk.record.text("reason", qk, score=reading)
            reading = qk.record.text("reading", qk, score=reading) or reading
        self.cells["scoring"].add(reading, f"attention {self.q(a.id)} "
                                  + rec.text("reason", s, **more) + modifier_reading(a) + why)

    def query_type_and_multiplicity(self) -> None:
        qt, qm = self.cells["query_type"], self.cells["query_multiplicity"]
        self.sources = {a.id: self.query_sources(a) for a in self.atts}
        for a in self.atts:
            for kind, reasons in self.sources[a.id].items():
                for reason, _ in reasons:
                    qt.add(kind, reason)
            for src, role, _ in edges(a):  # a policy edge is no query edge (RBAN's aspect)
                if "policy" in role.split("+"):
                    for kind in self.sources[a.id]:
                        qt.add(kind, mechanisms.POLICY_REASON.format(
                            module=self.q(a.id), src=self.q(src)))
            if a.heads > 1:
                qm.add("Multi-Head", f"attention {self.q(a.id)} " + (
                    mechanisms.TRAITS["kv_heads"].text("reason", a) if a.kv_heads
                    else f"has {a.heads} heads") + mechanisms.heads.heads_reading(a))
            if a.capsules:
                own = isinstance(a.query, ir.Op) and a.query.fn == "learned"
                qm.add("Capsule-Based", f"attention {self.q(a.id)} has one capsule per class "
                       f"({a.capsules}), " + ("each with a learned query (eq. 43-45)" if own else
                                              "each querying with its row of an earlier capsule "
                                              "module's output (eq. 41-45)"))
        self.hops()
        if not qm.values:
            names = self.listing(list(dict.fromkeys(self.q(a.id) for a in self.atts)))
            qm.add("Singular", f"one query per prediction, one head and one hop in {names}")

    def hops(self) -> None:
        """Multi-hop (eq. 41-42): hop s+1 re-reads the same features with a query refined by
        hop s's context. A stack whose layers also re-encode their keys from the previous
        layer's output is a hop in the survey's text (§3.3.2 calls the Transformer's stacked
        self-attention multi-hop) but not in its Table III, which lists QANet, PSAC and
        Winata et al.'s stacks without Multi-Hop: ``reading`` picks one, and the cell says
        which it took."""
        qm = self.cells["query_multiplicity"]
        by_template: dict[str, dict[int, ir.Attention]] = {}
        for a in self.atts:
            if a.hop is not None and a.hop.count > 1:
                by_template.setdefault(a.hop.template, {})[a.hop.index] = a
        for template, hops in sorted(by_template.items()):
            for i in sorted(hops):
                prev, nxt = hops.get(i - 1), hops[i]
                if prev is None or prev.id not in self.expr_ancestors(nxt.query):
                    continue
                if self.keys_base(prev) == self.keys_base(nxt):
                    keys = ", ".join(self.q(k) for k in sorted(self.keys_base(nxt)))
                    qm.add("Multi-Hop", f"`{template}` runs {nxt.hop.count} hops over "
                           f"{keys}; the query of each hop is refined by the previous hop's "
                           f"context (`{nxt.id}` reads `{prev.id}`, eq. 41-42)")
                    break
                if any(prev.id in self.expr_ancestors(e) for e in (nxt.keys, nxt.values)):
                    self.stack(template, prev, nxt)
                    break

    def stack(self, template: str, prev: ir.Attention, nxt: ir.Attention) -> None:
        """A stack of layers that re-encode queries and keys: counted under the text
        reading, noted under the table reading."""
        qm = self.cells["query_multiplicity"]
        what = (f"`{template}` stacks {nxt.hop.count} layers whose queries and keys both come "
                f"from the previous layer's output (`{nxt.id}` reads `{prev.id}`)")
        if self.reading == "text":
            qm.add("Multi-Hop", f"{what}; the survey's text (§3.3.2) calls such a stack "
                   "multi-hop (reading: text)")
            qm.notes.append(f"reading: text. {what}: counted as Multi-Hop, as §3.3.2 reads the "
                            "Transformer's stack; the survey's Table III does not count such "
                            "stacks (QANet, PSAC, Winata et al.); `--reading table` follows it")
        else:
            qm.notes.append(f"reading: table. {what}: not a hop. The survey's text (§3.3.2) "
                            "calls such a stack multi-hop, but its Table III counts only hops "
                            "that re-read the same features and lists QANet, PSAC and Winata "
                            "et al.'s stacks without Multi-Hop; `--reading text` counts it")


def classify_model(cm: CheckedModel, reading: str = "table") -> Classification:
    """The model's Table III row, derived from its graph. ``reading``: "table" follows the
    survey's Table III where its text reads a mechanism otherwise, "text" its §3.3.2."""
    return Classifier(cm, reading).run()

