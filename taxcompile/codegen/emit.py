"""Stage 7b: a ``FilePlan`` -> the generated file's text.

Pure rendering: the plan says what the file holds, the templates in
``templates/codegen/`` say how it reads (``model.py.j2`` the file, ``attention.py.j2`` an
attention class with one template per score and alignment, ``helpers/<name>.py.j2`` a
helper function). The finished file is wrapped to 100 columns in one pass
(``layout.layout``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import jinja2

from .. import mechanisms as mech
from .imports import TEMPLATE_GLOBALS, recording
from .plan import FilePlan, ModuleClass
from .layout import layout
from .names import SUM

TEMPLATES = Path(__file__).parent.parent / "templates" / "codegen"
WIDTH = 100


def env() -> jinja2.Environment:
    """One environment per process (and per set of extension folders, the registry's
    ``TEMPLATE_PATHS``): each template is compiled once, however many models."""
    return _env(tuple(mech.TEMPLATE_PATHS))


@functools.lru_cache(maxsize=None)
def _env(extensions: tuple[str, ...]) -> jinja2.Environment:
    e = jinja2.Environment(loader=jinja2.FileSystemLoader([str(TEMPLATES), *extensions]),
                           trim_blocks=True,
                           lstrip_blocks=True, keep_trailing_newline=True,
                           undefined=jinja2.StrictUndefined, autoescape=False)
    e.globals.update(TEMPLATE_GLOBALS)  # `{{ F }}.relu(x)`: the file imports what is written
    e.globals["SUM"] = SUM  # `a.act("x + b", SUM)`: what the activation gets is a sum
    return e


@dataclass(frozen=True)
class ClassView:
    """A module class as the template writes it: one line per statement, indented from the
    method body's column (``layout`` wraps the finished file)."""

    name: str
    doc: tuple[str, ...]
    init: tuple[str, ...]
    signature: tuple[str, ...]
    forward: tuple[str, ...]
    keeps_cfg: bool
    init_params: tuple[str, ...] = ()


def commented(code: str, comment: str) -> str:
    """``code  # comment``; without code a comment line (``#`` alone when empty)."""
    if not code:
        return f"# {comment}".rstrip() if comment.strip() else "#"
    return code + (f"  # {comment}" if comment else "")


def class_view(c: ModuleClass) -> ClassView:
    init = tuple(commented(f"self.{sub.attr} = {sub.ctor}", sub.comment) for sub in c.submodules)
    forward = tuple("    " * s.depth + commented(s.code, s.comment) for s in c.body)
    signature = (f"def forward({', '.join(('self',) + c.params)}) -> {c.returns}:",)
    return ClassView(c.name, c.doc, init, signature, forward, c.keeps_cfg, c.init_params)


def render(plan: FilePlan) -> str:
    """The file: each part rendered once (the body first, then the imports it reads and
    the header above them), then wrapped to ``WIDTH`` columns in one pass. The imports are
    what the plan's code and the templates recorded as they were written (``imports``)."""
    e = env()
    used = set(plan.modules)
    with recording(used):
        body = _body(e, plan)
    t = e.get_template("model.py.j2")
    ctx = t.new_context(dict(plan=plan, uses=used))
    head = "".join(t.blocks["head"](ctx)) + "".join(t.blocks["imports"](ctx))
    return layout(head + body, WIDTH, keep=1)


def _body(e: jinja2.Environment, plan: FilePlan) -> str:
    helpers = [e.get_template(f"helpers/{h}.py.j2").render().rstrip() for h in plan.helpers]
    classes = [e.get_template(c.template).render(a=c.view).rstrip()
               for c in plan.attention_classes]
    outputs = [f"{f.name}: {f.type}" + (f" = {f.default}" if f.default else "") +
               f"  # {f.comment}" for f in plan.outputs]
    view = dict(plan=plan, helpers=helpers, classes=classes,
                blocks=[class_view(b) for b in plan.blocks], model=class_view(plan.model),
                outputs=outputs)
    t = e.get_template("model.py.j2")
    return "".join(t.blocks["body"](t.new_context(view)))
