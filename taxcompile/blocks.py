"""Shape rules of the everyday blocks that are not in the survey's vocabulary (issue 24):
``prepend(x, n)``, learned vectors (a CLS token, registers) before the first position of a
sequence. The rules are ``check.Checker`` methods, registered in ``ops.OPS`` by
``ops.shape_rule``; ``check`` imports this module. No torch here (the front end)."""

from __future__ import annotations

from . import ops
from .check import Checker
from .check.core import Shape, _name


@ops.shape_rule("prepend")
def shape_prepend(self: Checker, e, a, nid):
    """n more positions on the last axis, named ``S+n``: (…, S, d) -> (…, S+n, d)."""
    if not self._seq(e, a[0], "prepends positions to a sequence"):
        return None
    if a[0].dim is None:
        self.err(e.args[0].loc, f"`prepend` adds learned vectors, but `{_name(e.args[0])}` "
                 f"holds token ids {a[0]}", "embed them first: `prepend(embed(x, d), 1)`")
        return None
    node = self.cm.model.by_id.get(nid)
    if getattr(node, "hop", None) is not None:
        self.err(e.loc, "`prepend` inside a `repeat` would add its vectors again at every hop",
                 "prepend once, before the repeat: `feature x = prepend(embed(src, d), 1)`")
        return None
    n, axis = int(e.param("n", 1)), a[0].axes[-1]
    name = f"{axis}+{n}"
    size = self.cm.sizes.get(axis)
    self.cm.sizes[name] = None if size is None else size + n
    self.cm.axis_origin.setdefault(name, self.cm.axis_origin.get(axis, nid))
    return Shape(a[0].axes[:-1] + (name,), a[0].dim)
