"""The spec's own entries: its ``paper`` block and the merging of a variant
(``model v : base { … }``) into its base's statements. Errors of this kind: no or a
second ``paper`` block, an unknown or repeated paper field, a variant's ``update`` with no
single base ``update`` to replace."""

from __future__ import annotations

from .. import ast, ir
from ..suggest import suggest
from .constants import Constants

PAPER_FIELDS = ("cite", "ref", "row", "title", "year")


class Spec(Constants):
    """The paper block and variants (a part of ``lower.Lowerer``)."""

    def paper(self, papers: list[ast.Paper]) -> ir.Paper | None:
        if not papers:
            self.err(ast.Pos(1, 1), "the spec has no `paper` block",
                     'start with `paper bahdanau2015 { cite = "Bahdanau et al."  year = 2015 }`')
            return None
        for extra in papers[1:]:
            self.err(extra.pos, "a spec describes one paper; found a second `paper` block",
                     "put each paper in its own .attn file")
        p = papers[0]
        self.check_ident(p.name, p.pos, "paper")
        vals: dict[str, ir.Scalar] = {}
        for f in p.fields:
            if f.name not in PAPER_FIELDS:
                self.err(f.pos, f"unknown paper field `{f.name}`", suggest(f.name, PAPER_FIELDS))
                continue
            if f.name in vals:
                self.err(f.pos, f"paper field `{f.name}` is given twice")
                continue
            if f.name in ("cite", "title"):
                if not isinstance(f.value, ast.String):
                    self.err(f.value.pos, f"`{f.name}` must be a string in double quotes")
                    continue
                if not f.value.value.strip() or len(f.value.value) > 300 or "\n" in f.value.value:
                    self.err(f.value.pos, f"`{f.name}` must be a non-empty one-line string")
                    continue
                vals[f.name] = f.value.value
            else:
                lo, hi = {"ref": (1, 100000), "row": (1, 1000), "year": (1900, 2100)}[f.name]
                v = self.as_int(f.value, None, f"`{f.name}`", lo, hi)
                if v is not None:
                    vals[f.name] = v
        if "cite" not in vals:
            if not any(f.name == "cite" for f in p.fields):
                self.err(p.pos, "the paper block needs `cite`",
                         'the citation label as in Table III, e.g. `cite = "Vaswani et al."`')
            return None
        return ir.Paper(id=p.name, loc=self.loc(p.pos), **vals)

    @staticmethod
    def stmt_key(s: ast.Stmt):
        if isinstance(s, ast.Feature) and s.role == "update":
            return None
        if isinstance(s, (ast.Feature, ast.Input, ast.Attention, ast.Repeat, ast.Let)):
            return s.name
        return None

    def merge(self, base: tuple, override: tuple, base_name: str = "") -> tuple:
        """A variant's statements replace the base's statements of the same name; an
        ``update NAME`` replaces the base's one top-level ``update NAME`` in its place (with
        none or several there, where it would go is ambiguous: an error)."""
        over = {self.stmt_key(s): s for s in override if self.stmt_key(s) is not None}
        over_updates: dict[str, ast.Feature] = {}
        for s in override:
            if isinstance(s, ast.Feature) and s.role == "update":
                n = sum(isinstance(b, ast.Feature) and b.role == "update" and b.name == s.name
                        for b in base)
                if s.name in over_updates:
                    self.err(s.pos, f"`update {s.name}` appears twice in this variant",
                             f"a variant's `update {s.name}` replaces the base's; name the extra "
                             f"versions instead (`feature {s.name}2 = …`)")
                elif n != 1:
                    where = "no" if n == 0 else f"{n}"
                    self.err(s.pos, f"`update {s.name}` in a variant replaces the base's "
                             f"`update {s.name}`, but `{base_name}` has {where} top-level "
                             f"`update {s.name}`", "updates are ordered, so where a new one "
                             "would go is ambiguous: define the model in full, or name the new "
                             f"version (`feature {s.name}2 = …`) and read it where it is used")
                over_updates[s.name] = s
        used: set[str] = set()
        out = []
        for s in base:
            k = self.stmt_key(s)
            if k is not None and k in over:
                out.append(over[k])
                used.add(k)
            elif isinstance(s, ast.Feature) and s.role == "update" and s.name in over_updates:
                out.append(over_updates[s.name])
            else:
                out.append(s)
        lets = []
        for s in override:
            k = self.stmt_key(s)
            if isinstance(s, ast.Feature) and s.role == "update":
                continue  # in the base's update's place, or refused above
            if k is None or k not in used:
                # New constants go first so replaced statements can use them.
                (lets if isinstance(s, ast.Let) else out).append(s)
        return tuple(lets + out)
