"""`taxcompile classify --torch MODULE:FACTORY [--format json]`: errors are one line,
exit 2."""
from __future__ import annotations

import importlib
import sys


def _fail(msg: str) -> int:
    print(f"taxcompile: error: {msg}", file=sys.stderr)
    return 2


def classify_torch(target: str, with_files: bool, fmt: str = "text") -> int:
    if with_files:
        return _fail("--torch classifies one model: give no spec files with it")
    mod_name, _, fn_name = target.partition(":")
    if not mod_name or not fn_name:
        return _fail(f"--torch wants MODULE:FACTORY (e.g. mypkg.models:make), got {target!r}")
    sys.path.insert(0, ".")
    try:
        factory = getattr(importlib.import_module(mod_name), fn_name)
    except ImportError as e:
        return _fail(f"cannot import {mod_name!r}: {e}")
    except AttributeError:
        return _fail(f"module {mod_name!r} has no {fn_name!r}")
    try:
        got = factory()
        model, inputs = got
    except Exception as e:
        return _fail(f"{target}() must return (model, example_inputs): "
                     f"{type(e).__name__}: {e}")
    from .capture import CaptureError
    from .report import classify_module

    try:
        res = classify_module(model, inputs)
    except CaptureError as e:
        return _fail(str(e))
    if fmt == "json":
        from .schema import dump

        print(dump(res))
    else:
        print(res.text())
    return 0
