"""Stage 4, cross-entry checks: the ``taxcompile.check`` package, under the name the rest
of the compiler imports (``checks.check``, ``checks.Shape``, ``checks.CheckedModel``, …).
The package's docstring says what is checked where (``lower``, ``module_checks`` and the
package's parts)."""

from __future__ import annotations

from . import ir  # noqa: F401  (``checks.ir``, as before)
from .check import *  # noqa: F401,F403
from .check import __all__  # noqa: F401
from .check import (_base_ref, _hop_place, _name, _short, _show, _vocab,  # noqa: F401
                    Checker)
