"""lark, imported without the third-party ``regex`` module.

lark imports ``regex`` whenever it is installed, though it uses it only for
``Lark(regex=True)`` and for terminals with Unicode categories (``\\p{...}``); the
grammar has neither. Importing it is some 20 ms of CPU, a tenth of a cold
``table specs/``. While lark's modules load, ``regex`` is hidden from them
(``sys.modules["regex"] = None`` makes its import fail); it is left importable for
everyone else afterwards."""

from __future__ import annotations

import sys

_HIDDEN = "regex"


def _load() -> None:
    if "lark" in sys.modules:
        return
    hide = _HIDDEN not in sys.modules
    if hide:
        sys.modules[_HIDDEN] = None  # type: ignore[assignment]
    try:
        import lark  # noqa: F401
    finally:
        if hide and sys.modules.get(_HIDDEN, 0) is None:
            del sys.modules[_HIDDEN]


_load()

from lark import (Lark, Token, Transformer, Tree, UnexpectedCharacters,  # noqa: E402
                  UnexpectedEOF, UnexpectedInput, UnexpectedToken, v_args)
from lark import __version__ as VERSION  # noqa: E402

__all__ = ["Lark", "Token", "Transformer", "Tree", "UnexpectedCharacters", "UnexpectedEOF",
           "UnexpectedInput", "UnexpectedToken", "VERSION", "v_args"]
