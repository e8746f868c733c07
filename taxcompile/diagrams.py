"""Architecture diagrams (graphviz) in the survey's visual language (Fig. 1-11).

One cluster per model variant. Inputs, feature models, query models, attention
modules (with their score, alignment, heads…), affinity matrices and output models
are drawn in the colours of the survey's figures; edges carry the tensor's shape and
the role it plays (q, k, v). A ``repeat`` is drawn once, as a cluster "× N", with the
edges that carry a feature into the next hop. When a model attends over several
inputs (co-attention, rotatory attention) the nodes of each input are grouped; in a
hierarchy each level (its axes) is grouped.

Needs only the ``graphviz`` Python package to build the DOT source; rendering to
svg/png/pdf runs graphviz's ``dot``."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import graphviz

from . import diagram_files, ir, mechanisms
from .checks import CheckedModel, CheckedSpec
from .classification import classify_model
from .diagnostics import visible
from .diagram_files import FORMATS, MARK, ZEROS, is_diagram  # noqa: F401  (diagrams.is_diagram)
from .graph import edges as graph_edges
from .ops import OPS


STYLE = {  # fill colours after the survey's figures
    "input": dict(shape="box", style="filled", fillcolor="#eeeeee"),
    "feature": dict(shape="box", style="rounded,filled", fillcolor="#dbe9f6"),
    "query": dict(shape="box", style="rounded,filled", fillcolor="#e2f0d9"),
    "output": dict(shape="box", style="rounded,filled", fillcolor="#fde9d9"),
    "affinity": dict(shape="diamond", style="filled", fillcolor="#f4cccc"),
    "attention": dict(shape="box", style="filled,bold", fillcolor="#fff2cc", penwidth="1.6"),
}
ROLE = {"query": "q", "keys": "k", "values": "v", "keys+values": "k, v",
        "query+keys+values": "q, k, v", "query+keys": "q, k", "query+values": "q, v",
        "affinity": "A", "input": "", "feed": "fed", "init": "initial state",
        "state": "state"}


class DiagramError(Exception):
    """A diagram that cannot be written (an unknown format, `dot` failing)."""


def _name(m: ir.Model, node_id: str) -> str:
    """A node as a reader knows it: its name in the spec."""
    n = m.node(node_id)
    return getattr(n, "name", n.id)


_PREC = {"add": 1, "sub": 1, "rsub": 1, "mul": 2}  # infix operators' precedence


def expr_text(m: ir.Model, e: ir.Expr, outside: bool = False) -> str:
    """An expression as written; ``outside`` a repeat, hop references keep their hop."""
    if isinstance(e, ir.Ref):
        n = m.node(e.node)
        if outside and getattr(n, "hop", None) is not None and "@" not in n.id:
            return n.id
        return _name(m, e.node)
    op = OPS[e.fn]
    if op.infix:
        def operand(a: ir.Expr, right: bool) -> str:
            text = expr_text(m, a, outside)
            inner = isinstance(a, ir.Op) and a.fn in _PREC  # (`att.weights` binds tightest)
            # a sum inside a product, or a difference on the right of `-`, keeps its brackets
            if inner and (_PREC[a.fn] < _PREC[e.fn] or right and e.fn in ("sub", "rsub")
                          and _PREC[a.fn] == _PREC[e.fn]):
                return f"({text})"
            return text
        if e.fn == "weights":  # `att.weights`
            return f"{expr_text(m, e.args[0], outside)}.weights"
        if e.fn == "rsub":
            return f"{float(e.param('c', 1.0)):g} - {operand(e.args[0], True)}"
        return f" {op.label} ".join(operand(a, i > 0) for i, a in enumerate(e.args))
    sig = op.params
    defaults = {p.name: p.default for p in sig}
    order = {p.name: i for i, p in enumerate(sig)}  # as the signature reads, not sorted
    parts = [expr_text(m, a, outside) for a in e.args]
    for key, value in sorted(e.params, key=lambda kv: order.get(kv[0], len(order))):
        if key in ("feed", "init", "init_c", "share", "tie", "state"):
            parts.append(f"{key} = {_name(m, str(value))}")
        elif defaults.get(key) != value:
            parts.append(str(value) if key in ("d", "hidden", "d_ff", "classes", "factor", "p")
                         else f"{key} = {_scalar(value)}")
    return f"{op.label}({', '.join(parts)})"


def _scalar(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _wrap(text: str, width: int = 38) -> str:
    """Break long expressions after commas so boxes stay narrow."""
    lines: list[str] = []
    for piece in text.split(", "):
        if lines and len(lines[-1]) + len(piece) + 2 <= width:
            lines[-1] += ", " + piece
        else:
            if lines:
                lines[-1] += ","
            lines.append(piece if not lines else "  " + piece)
    return "\n".join(lines)


def attention_label(a: ir.Attention) -> list[str]:
    s, al = a.score, a.align
    rec = mechanisms.score(s.fn)
    score = rec.text("label", s)
    p = s.data()  # its parameters
    extra = [f"d_w = {p['d_w']}"] if p.get("d_w") else []
    # an activation is shown where it is not the score's default (tanh for the additive
    # and activated general scores)
    default = next((p.default for p in rec.params if p.name == "act"), None)
    if p.get("act") and default is not None and p["act"] != default:
        extra.append(str(p["act"]))
    if p.get("kind"):
        extra.append(p["kind"])
    align = mechanisms.align(al.fn).text("label", al)
    lines = [f"attention {a.name}", f"score: {score}" + (f" ({', '.join(extra)})" if extra else ""),
             f"align: {align}"]
    more = a.traits()
    if more:
        lines.append(" · ".join(more))
    return lines


@dataclass
class _Cluster:
    name: str
    label: str
    style: dict
    nodes: list[str] = field(default_factory=list)
    children: dict[str, "_Cluster"] = field(default_factory=dict)

    def all_nodes(self):
        """The nodes of this cluster and of the clusters inside it."""
        yield from self.nodes
        for child in self.children.values():
            yield from child.all_nodes()


class Drawer:
    def __init__(self, cm: CheckedModel, prefix: str):
        self.cm = cm
        self.m = cm.model
        self.prefix = prefix  # node ids are prefixed per variant: one file holds them all
        self.rep: dict[str, str] = {}  # node id -> the node drawn for it (first hop)
        first: dict[str, str] = {}
        for n in self.m.nodes:
            hop = getattr(n, "hop", None)
            if hop is not None and hop.first:
                first[hop.template] = n.id
        for n in self.m.nodes:
            hop = getattr(n, "hop", None)
            self.rep[n.id] = first.get(hop.template, n.id) if hop is not None else n.id

    def gid(self, node_id: str) -> str:
        return f"{self.prefix}/{self.rep[node_id]}"

    def label(self, n: ir.AnyNode) -> str:
        shape = self.cm.shapes.get(n.id)
        if isinstance(n, ir.Input):
            what = n.kind + (f", vocab {n.vocab}" if n.vocab else "")
            sizes = [f"{a} = {s}" for a, s in zip(n.axes, n.sizes) if s is not None]
            lines = [f"input {n.id}", what + (f" ({', '.join(sizes)})" if sizes else ""),
                     str(shape)]
            if n.autoregressive:
                lines.insert(2, "autoregressive")
        elif isinstance(n, ir.Attention):
            lines = attention_label(n) + [f"c: {shape}"]
        else:
            word = {"feature": "", "query": "query ", "output": "output ",
                    "affinity": "affinity "}[n.kind_]
            text = expr_text(self.m, n.expr, outside=n.hop is None)
            lines = [f"{word}{n.name} =", _wrap(text), str(shape)]
        return "\n".join(lines)

    def clusters(self) -> _Cluster:
        root = _Cluster("", "", {})
        self.where: dict[str, tuple] = {}  # node id -> the keys of its clusters, outermost first
        grouping = self.grouping()
        blocks = self.blocks()
        found: dict[str, set] = {}  # outermost block -> the groups of its nodes
        for n in self.m.nodes:
            hop = getattr(n, "hop", None)
            if hop is not None and self.rep[n.id] == n.id:
                g = grouping.get(n.id)
                if g is not None or not isinstance(n, ir.Attention):
                    found.setdefault(hop.template.split(".")[0], set()).add(g)
        block_group = {b: next(iter(gs)) for b, gs in found.items()
                       if len(gs) == 1 and None not in gs}
        for n in self.m.nodes:
            if self.rep[n.id] != n.id:
                continue
            hop = getattr(n, "hop", None)
            if hop is None:
                group = grouping.get(n.id)
                if group:
                    key, label = group
                    c = root.children.setdefault(key, _Cluster(
                        key, label, dict(style="dashed", color="#999999")))
                    c.nodes.append(n.id)
                    self.where[n.id] = (key,)
                else:
                    root.nodes.append(n.id)
                    self.where[n.id] = ()
                continue
            # nested repeats: one cluster per enclosing block, outermost first, inside the
            # group (an input's nodes) that holds the whole outermost block, if one does
            parts = hop.template.split(".")[:-1]
            c = root
            path = ""
            keys: list[str] = []
            group = block_group.get(parts[0]) if parts else None
            if group:
                key, label = group
                c = root.children.setdefault(key, _Cluster(
                    key, label, dict(style="dashed", color="#999999")))
                keys.append(key)
            for i, part in enumerate(parts):
                path = f"{path}.{part}" if path else part
                info = blocks.get(path)
                if info is None:
                    break
                count, shared = info
                c = c.children.setdefault("hop:" + path, _Cluster(
                    "hop:" + path, f"repeat {part} × {count}" + (" (shared weights)" if shared
                                                                 else ""),
                    dict(style="rounded", color="#b45f06", penwidth="1.4")))
                keys.append("hop:" + path)
            c.nodes.append(n.id)
            self.where[n.id] = tuple(keys)
        return root

    def blocks(self) -> dict[str, tuple[int, bool]]:
        out: dict[str, tuple[int, bool]] = {}
        for n in self.m.nodes:
            hop = getattr(n, "hop", None)
            if hop is not None:
                block_template = hop.template.rsplit(".", 1)[0]
                out.setdefault(block_template, (hop.count, hop.shared))
        # enclosing blocks of nested repeats: their counts come from their own nodes
        return out

    def grouping(self) -> dict[str, tuple[str, str]]:
        """Co-attention partners: the features of each input together; levels of a
        hierarchy: the features of each level (their axes) together."""
        from .classification import Classifier

        c = Classifier(self.cm)
        attended = sorted(c.attended_inputs())
        out: dict[str, tuple[str, str]] = {}
        if len(attended) > 1:
            for n in self.m.nodes:
                if isinstance(n, ir.Attention) and n.affinity:
                    # parallel co-attention: the affinity matrix with the modules reading it
                    key = (f"coatt:{n.affinity}", f"co-attention through {_name(self.m, n.affinity)}")
                    out[n.id] = out[n.affinity] = key
                if n.id in out:  # an attention module over one input is in its group
                    continue
                roots = c._node_roots(n.id) & set(attended)
                if len(roots) == 1:
                    (r,) = roots
                    out[n.id] = (f"input:{r}", f"{r}")
            return out
        row = classify_model(self.cm).row()
        if row["feature_levels"] != "Single-Level":
            for n in self.m.nodes:
                # an attention module belongs to the level it attends over
                shape = self.cm.shapes.get(n.keys.node if isinstance(n, ir.Attention) and
                                           isinstance(n.keys, ir.Ref) else n.id)
                if shape is not None and shape.axes and not isinstance(n, ir.Input):
                    axes = ", ".join(shape.axes)
                    out[n.id] = (f"level:{axes}", f"level ({axes})")
        return out

    def draw(self, g: graphviz.Digraph, title: str) -> None:
        with g.subgraph(name=f"cluster_{self.prefix}") as sub:
            sub.attr(label=title, fontsize="14", style="rounded", color="#444444",
                     labeljust="l", margin="14")
            self._emit(sub, self.clusters())
            seen: set[tuple[str, str]] = set()
            for n in self.m.nodes:
                for src, role, delayed in graph_edges(n, self.cm.feed_now, self.cm.past):
                    a, b = self.gid(src), self.gid(n.id)
                    if (a, b) in seen:
                        continue
                    seen.add((a, b))
                    shape = self.cm.shapes.get(src)
                    tag = ROLE.get(role, role)
                    text = f"{tag} {shape}".strip() if shape is not None else tag
                    # An edge between clusters gets an external label (placed after the
                    # layout): an ordinary one is a node of the layout that can push a
                    # cluster's border over the nodes and land on another node's text.
                    inside = self.where.get(self.rep[src]) == self.where.get(self.rep[n.id])
                    attrs = {"label" if inside else "xlabel": text, "fontsize": "9"}
                    if delayed:  # an external label: graphviz keeps it clear of the nodes
                        when = "< t" if (src, n.id) in self.cm.past else "t−1"
                        attrs.update(style="dashed", constraint="false", color="#666666",
                                     label="", xlabel=f"{tag} ({when})".strip())
                    elif self.carried(src, n.id):
                        attrs.update(style="dashed", label="next hop", constraint="false")
                    sub.edge(a, b, **attrs)

    def carried(self, src: str, dst: str) -> bool:
        """An edge from one hop of a block into a later hop of the same block."""
        a, b = getattr(self.m.node(src), "hop", None), getattr(self.m.node(dst), "hop", None)
        if a is None or b is None:
            return False
        block_a, block_b = a.template.rsplit(".", 1)[0], b.template.rsplit(".", 1)[0]
        return block_a == block_b and (a.outer, a.index) != (b.outer, b.index)

    def _emit(self, g, c: _Cluster) -> None:
        for node_id in c.nodes:
            n = self.m.node(node_id)
            g.node(self.gid(node_id), self.label(n), **STYLE[n.kind_])
        for key in sorted(c.children):
            child = c.children[key]
            safe = "".join(ch if ch.isalnum() else "_" for ch in f"{self.prefix}_{key}")
            with g.subgraph(name=f"cluster_{safe}") as sub:
                sub.attr(label="", fontsize="11", margin="14", **child.style)
                # The title is a node above the cluster's nodes, not the cluster's label:
                # dot routes edges around nodes and keeps external labels off them, but
                # draws both over a cluster's label.
                title = f"{self.prefix}/{safe}/title"
                sub.node(title, child.label, shape="plaintext", fontsize="11", height="0.1",
                         margin="0.02,0.02")
                self._emit(sub, child)
                for node_id in child.all_nodes():
                    sub.edge(title, self.gid(node_id), style="invis")


class Diagram(graphviz.Digraph):
    """A ``graphviz.Digraph`` that Jupyter shows as SVG drawn by ``dot``."""

    def _repr_svg_(self) -> str:
        return _svg(self.source)


# Boxes in one drawing: `dot`'s layout grows faster than its boxes (the transformer and
# its variants, 13 boxes each: 143 boxes 3.8 s, 533 boxes 8.4 s, 1,313 boxes 39 s on a
# busy 2-core host); the largest spec in specs/ and examples/ draws 28.
MAX_DIAGRAM_NODES = 500


def build(cs: CheckedSpec, models: list[str] | None = None) -> Diagram:
    """The DOT graph of every model variant of a spec (of ``models`` only, if given: then
    without the paper's title, which the page around it shows). Raises DiagramError past
    ``MAX_DIAGRAM_NODES`` boxes."""
    boxes = sum(getattr(n, "hop", None) is None or n.hop.first  # a repeat is drawn once
                for cm in cs.models if models is None or cm.model.name in models
                for n in cm.model.nodes)
    if boxes > MAX_DIAGRAM_NODES:
        raise DiagramError(f"the diagram would have {boxes:,} boxes, more than the "
                           f"{MAX_DIAGRAM_NODES:,} graphviz lays out in reasonable time: "
                           "split the spec's variants into several specs")
    p = cs.spec.paper
    title = f"{p.cite}" + (f" {p.year}" if p.year else "") + (f": {p.title}" if p.title else "")
    g = Diagram(name=p.id, graph_attr=dict(
        comment=MARK + ZEROS, rankdir="TB", fontname="Helvetica",
        label=graphviz.escape(visible(title)) if models is None else "", labelloc="t",
        fontsize="16", nodesep="0.4", ranksep="0.55", newrank="true", forcelabels="true"),
        node_attr=dict(fontname="Helvetica", fontsize="10", margin="0.12,0.06"),
        edge_attr=dict(fontname="Helvetica", color="#555555", arrowsize="0.7"))
    for cm in cs.models:
        m = cm.model
        if models is not None and m.name not in models:
            continue
        head = f"model {m.name}" + (f" : {m.base}" if m.base else "")
        Drawer(cm, m.name).draw(g, head)
    return g


def render_svg(cs: CheckedSpec, models: list[str] | None = None) -> str:
    """The diagram (of ``models`` only, if given) as SVG text, drawn by graphviz's `dot`
    (raises DiagramError when it fails or is missing)."""
    return _svg(build(cs, models).source)


def _svg(source: str) -> str:
    dot = shutil.which("dot")
    if dot is None:
        raise DiagramError("graphviz's `dot` program was not found")
    done = subprocess.run([dot, "-Tsvg"], input=source.encode("utf-8"),
                          capture_output=True, timeout=120)
    if done.returncode != 0:
        raise DiagramError(f"`dot` failed: {done.stderr.decode('utf-8', 'replace').strip()}")
    return done.stdout.decode("utf-8")


def write(cs: CheckedSpec, out: Path) -> tuple[list[Path], str]:
    """Write the diagram to ``out`` (format from its suffix). Returns the files written
    and a note for the user (graphviz missing: the .dot source is written instead)."""
    fmt = out.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        if out.is_dir():  # `-o .`: its name has no suffix
            diagram_files.check_target(out)
        raise DiagramError(f"cannot write the diagram to {out}: the diagram formats are "
                           + ", ".join(f".{f}" for f in FORMATS) + f" (e.g. `-o {out.stem or 'model'}.svg`)")
    diagram_files.check_target(out)
    source = build(cs).source
    if fmt == "dot":
        diagram_files.write(out, diagram_files.sealed(fmt, source.encode("utf-8")))
        return [out], ""
    dot = shutil.which("dot")
    if dot is None:
        dot_path = out.with_suffix(".dot")
        diagram_files.check_target(dot_path)
        diagram_files.write(dot_path, diagram_files.sealed("dot", source.encode("utf-8")))
        return [dot_path], (f"graphviz's `dot` program was not found, so {out.name} was not "
                            f"drawn; wrote the graph source to {dot_path} instead. Install "
                            "graphviz (Debian: `apt-get install -y graphviz`) to render "
                            "svg, png or pdf.")
    done = subprocess.run([dot, f"-T{fmt}"], input=source.encode("utf-8"), capture_output=True,
                          timeout=120)
    if done.returncode != 0:
        raise DiagramError(f"`dot` failed: {done.stderr.decode('utf-8', 'replace').strip()}")
    diagram_files.write(out, diagram_files.sealed(fmt, diagram_files.marked(fmt, done.stdout)))
    return [out], ""

