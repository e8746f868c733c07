"""Stage 2: AST -> IR. Lowers each entry on its own (identifiers, fields, types,
constants), resolves names, merges model variants and unrolls ``repeat`` blocks; the parts
live in ``taxcompile/lowering/`` by concern (names and scopes, constants, the paper and
variants, inputs, features, attention statements reading the mechanism registry,
penalties, repeats), and ``Lowerer`` below joins them and lowers the spec model by model.

What is checked where: lowering reports the errors that one statement shows on its own,
read against the names declared before it (a bad identifier or reserved name, an unknown
or repeated field, option or parameter, a value of the wrong type or out of range, an
unknown name or hop, a variant's ambiguous ``update``, the spec's node budget); a
statement that fails here does not reach the IR, and the name it defines is known as
refused (``Scope.poisoned``): its uses report nothing more, one error per cause.
Cross-entry checks, which need the whole model (forward references, cycles, shapes,
whether a mechanism fits its statement, decoders), live in ``checks.py``.
``taxcompile/lowering/__init__.py`` lists which part reports what."""

from __future__ import annotations

from . import ast, ir
from .lowering.attention import (  # noqa: F401  (read by checks and tests)
    ALIGNS, ATTENTION_FIELDS, BIASES, HEADS_OUT, MASKS, POSITIONS, SCORES,
    SCORES_WITHOUT_QUERY, Attentions)
from .lowering.base import (  # noqa: F401
    FLOAT32_MAX, MAX_INT, ModelState, TooBig, bad_identifier)
from .lowering.features import NAMED_HINT, OPS  # noqa: F401
from .lowering.inputs import INPUT_KINDS, MASK_KINDS, Inputs  # noqa: F401
from .lowering.names import Names, Scope
from .lowering.repeats import MAX_HOPS, Repeats  # noqa: F401
from .lowering.spec import PAPER_FIELDS, Spec  # noqa: F401
from .ops import ACTS, P, enum, node, pint  # noqa: F401  (the parameter vocabulary)
from .suggest import suggest

MAX_NODES = 5000
# Nodes of all models of a spec together (variants and `repeat` hops unrolled): what the
# front end's time and memory grow with. A one-line variant of a large model is a whole
# model again, so without this bound 1 MB of variants would cost hours and gigabytes;
# with it, a spec costs at most a few seconds (the largest in specs/ has 156 nodes).
MAX_SPEC_NODES = 10_000


class Lowerer(Spec, Inputs, Attentions, Repeats, Names):
    """Lowers one spec: its ``let``s, its paper, then each model (variants merged into
    their base) statement by statement. Each part's methods are in ``taxcompile/lowering``;
    the state of the model being lowered is ``self.m`` (``ModelState``)."""

    def run(self) -> ir.Spec:
        papers = [i for i in self.module.items if isinstance(i, ast.Paper)]
        models = [i for i in self.module.items if isinstance(i, ast.Model)]
        for item in self.module.items:
            if isinstance(item, ast.Let):
                v = None
                if self.check_ident(item.name, item.pos, "constant"):
                    if item.name in self.consts:
                        self.err(item.pos, f"constant `{item.name}` is defined twice")
                    v = self.const(item.value, None)
                    if v is not None:
                        self.consts[item.name] = v
                        self.const_syms[item.name] = self.let_sym(item.value, None, item.name)
                if v is None and item.name not in self.consts:
                    self.poisoned.add(item.name)  # reported: its uses are not again
        paper = self.paper(papers)
        if not models:
            self.err(ast.Pos(1, 1), "the spec defines no model",
                     "add `model NAME { … }` with inputs, features and attention modules")
        by_name: dict[str, ast.Model] = {}
        refused: set[str] = set()  # models whose name was refused (reported)
        out: list[ir.Model] = []
        for m in models:
            if self.budget.exceeded:  # past MAX_SPEC_NODES: the rest is not lowered
                break
            # a model's name is only a file name (`paper_model.py`) and text in the
            # generated code, so `global` (Luong et al.'s global attention) is a fine one
            if not self.check_ident(m.name, m.pos, "model", python_keywords=True):
                refused.add(m.name)
                continue
            if m.name in by_name:
                self.err(m.pos, f"model `{m.name}` is defined twice")
                continue
            body = m.body
            if m.base is not None:
                base = by_name.get(m.base)
                if base is None and m.base in refused:
                    continue  # the base's name was refused, and reported there
                if base is None:
                    self.err(m.base_pos or m.pos, f"unknown base model `{m.base}`",
                             "a variant extends a model defined above it: " + suggest(m.base, by_name)
                             if by_name else "define the base model first")
                    continue
                body = self.merge(base.body, m.body, m.base)
            merged = ast.Model(m.pos, m.name, m.base, m.base_pos, body)
            by_name[m.name] = merged
            lowered = self.model(merged)
            if lowered is not None:
                out.append(lowered)
        self.c.raise_if_any()
        assert paper is not None
        return ir.Spec(file=self.file, paper=paper, constants=tuple(self.consts.items()),
                       const_syms=tuple(self.const_syms.items()), models=tuple(out))

    # ---- models -------------------------------------------------------------------

    def model(self, m: ast.Model) -> ir.Model | None:
        # top-level `let`s outside
        scope = Scope("", Scope("", None, consts=self.consts, poisoned=self.poisoned))
        self.m = ModelState(scope, m.pos)
        before = len(self.c.diagnostics)
        self.body(m.body, scope)
        if len(self.c.diagnostics) > before:
            return None
        if not any(isinstance(n, ir.Attention) for n in self.m.nodes):
            self.err(m.pos, f"model `{m.name}` has no attention module",
                     "add `attention NAME { query = …  keys = …  score = … }`")
            return None
        return ir.Model(name=m.name, base=m.base, nodes=tuple(self.m.nodes),
                        consts=tuple(self.m.consts), loc=self.loc(m.pos))

    def add_node(self, n: ir.AnyNode, pos: ast.Pos) -> None:
        self.budget.nodes += 1
        if self.budget.nodes > MAX_SPEC_NODES:
            if not self.budget.exceeded:
                self.err(self.m.pos, f"the spec has more than {MAX_SPEC_NODES:,} nodes in "
                         "its models (variants and `repeat` hops unrolled); this model passes "
                         "the limit", "split the spec, or compile fewer variants at once")
            self.budget.exceeded = True
            raise TooBig
        if len(self.m.nodes) >= MAX_NODES:
            self.err(pos, f"model has more than {MAX_NODES} nodes after unrolling `repeat` blocks",
                     "use fewer hops or fewer statements")
            raise TooBig
        self.m.nodes.append(n)
        self.m.ids.add(n.id)
        self.m.roles[n.id] = n.kind_

    def room(self, count: int) -> bool:
        """Whether ``count`` more nodes pass neither limit of ``add_node``."""
        return self.budget.nodes + count <= MAX_SPEC_NODES and \
            len(self.m.nodes) + count <= MAX_NODES

    def body(self, stmts, scope: Scope) -> None:
        self.declare(stmts, scope)
        try:
            for s in stmts:
                if isinstance(s, ast.Let):
                    v = self.const(s.value, scope) \
                        if self.check_ident(s.name, s.pos, "constant") else None
                    if v is None:
                        scope.poisoned.add(s.name)  # reported: its uses are not again
                    else:
                        scope.consts[s.name] = v
                        if scope is self.m.scope:
                            self.m.consts.append((s.name, v, self.let_sym(s.value, scope, s.name)))
                elif isinstance(s, ast.Input):
                    self.input(s, scope)
                elif isinstance(s, ast.Feature):
                    self.feature(s, scope)
                elif isinstance(s, ast.Attention):
                    self.attention(s, scope)
                elif isinstance(s, ast.Repeat):
                    self.repeat(s, scope)
        except TooBig:
            return


def lower(module: ast.Module, file: str, source: str | None = None) -> ir.Spec:
    return Lowerer(module, file, source).run()
