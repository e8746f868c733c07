"""Stage 7b: a ``FilePlan`` -> the generated file's text.

Pure rendering: the plan says what the file holds, the templates in
``templates/codegen/`` say how it reads (``model.py.j2`` the file, ``attention.py.j2`` an
attention class with one template per score and alignment, ``helpers/<name>.py.j2`` a
helper function). Forward statements and submodules are wrapped to 100 columns."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import jinja2

from .plan import FilePlan, ModuleClass, Stmt
from .pretty import wrap, wrap_comment

TEMPLATES = Path(__file__).parent.parent / "templates" / "codegen"
WIDTH = 100


@functools.lru_cache(maxsize=None)
def env() -> jinja2.Environment:
    """One environment per process: each template is compiled once, however many models."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True,
                              undefined=jinja2.StrictUndefined, autoescape=False)


@dataclass(frozen=True)
class ClassView:
    """A module class as the template writes it: lines already wrapped, indented from the
    method body's column."""

    name: str
    doc: tuple[str, ...]
    init: tuple[str, ...]
    signature: tuple[str, ...]
    forward: tuple[str, ...]
    keeps_cfg: bool


def stmt_lines(s: Stmt, indent: int) -> list[str]:
    pad = "    " * s.depth
    if not s.code:
        return [pad + x for x in wrap_comment(s.comment, indent + 4 * s.depth, WIDTH)]
    line = s.code + (f"  # {s.comment}" if s.comment else "")
    return [pad + x for x in wrap(line, indent + 4 * s.depth, WIDTH)]


def class_view(c: ModuleClass) -> ClassView:
    init: list[str] = []
    for sub in c.submodules:
        init += wrap(f"self.{sub.attr} = {sub.ctor}" + (f"  # {sub.comment}" if sub.comment
                                                          else ""), 8, WIDTH)
    forward = [line for s in c.body for line in stmt_lines(s, 8)]
    signature = wrap(f"def forward({', '.join(('self',) + c.params)}) -> {c.returns}:", 4, WIDTH)
    return ClassView(c.name, c.doc, tuple(init), tuple(signature), tuple(forward), c.keeps_cfg)


def names(code: str) -> set[str]:
    """The module-level names a piece of rendered code refers to (to import only those)."""
    return {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}


def render(plan: FilePlan) -> str:
    e = env()
    helpers = [e.get_template(f"helpers/{h}.py.j2").render().rstrip() for h in plan.helpers]
    classes = [e.get_template(c.template).render(a=c.view).rstrip()
               for c in plan.attention_classes]
    blocks = [class_view(b) for b in plan.blocks]
    model = class_view(plan.model)
    outputs = [line for f in plan.outputs for line in wrap(
        f"{f.name}: {f.type}" + (f" = {f.default}" if f.default else "") + f"  # {f.comment}",
        4, WIDTH)]
    view = dict(plan=plan, helpers=helpers, classes=classes, blocks=blocks, model=model,
                outputs=outputs)
    used = names(e.get_template("model.py.j2").render(**view, imports=False))
    return e.get_template("model.py.j2").render(**view, imports=True, math="math" in used,
                                                functional="F" in used,
                                                warnings="warnings" in used)
