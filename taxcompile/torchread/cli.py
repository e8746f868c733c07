"""`taxcompile classify --torch MODULE:FACTORY [--format json]` and `taxcompile lift --torch
MODULE:FACTORY [-o FILE]`: errors are one line, exit 2."""
from __future__ import annotations

import importlib
import sys


def _fail(msg: str) -> int:
    print(f"taxcompile: error: {msg}", file=sys.stderr)
    return 2


def _load(target: str):
    """(model, example inputs) from FACTORY(), or the one-line error message."""
    mod_name, _, fn_name = target.partition(":")
    if not mod_name or not fn_name:
        return f"--torch wants MODULE:FACTORY (e.g. mypkg.models:make), got {target!r}"
    sys.path.insert(0, ".")
    try:
        factory = getattr(importlib.import_module(mod_name), fn_name)
    except ImportError as e:
        return f"cannot import {mod_name!r}: {e}"
    except AttributeError:
        return f"module {mod_name!r} has no {fn_name!r}"
    try:
        got = factory()
        model, inputs = got
    except Exception as e:
        return f"{target}() must return (model, example_inputs): {type(e).__name__}: {e}"
    return model, inputs


def classify_torch(target: str, with_files: bool, fmt: str = "text") -> int:
    if with_files:
        return _fail("--torch classifies one model: give no spec files with it")
    got = _load(target)
    if isinstance(got, str):
        return _fail(got)
    model, inputs = got
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


def lift_torch(target: str, output: str | None) -> int:
    """Write the `.attn` sketch of FACTORY()'s model to ``output`` (stdout without one),
    only once it is complete and checks."""
    from pathlib import Path

    if output is not None and not Path(output).parent.is_dir():
        return _fail(f"cannot write {output}: no such directory {str(Path(output).parent)!r}")
    got = _load(target)
    if isinstance(got, str):
        return _fail(got)
    model, inputs = got
    from .capture import CaptureError
    from .lift import LiftError, lift_module

    import warnings

    try:
        with warnings.catch_warnings():  # torch's deprecation notices while exporting
            warnings.simplefilter("ignore", FutureWarning)
            text = lift_module(model, inputs, target.partition(":")[2], target)
    except (CaptureError, LiftError) as e:
        return _fail(str(e))
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as e:
        return _fail(f"cannot write {output}: {e.strerror or e}")
    return 0
