"""Generated modules imported from memory, under a stable name, so that their models pickle.

``load(source, stem)`` imports generated source as ``taxcompile.built.<stem>_<hash>``, the
hash being the first 16 hex digits of the source's SHA-256: the same source gets the same
module (and the same classes) on every call and in every process. The module stays in
``sys.modules``, so ``pickle``, ``torch.save`` and ``copy.deepcopy`` find its classes.

A fresh process has no such module yet, so the objects of a generated class pickle with
the source they came from (a ``copyreg`` reducer per class, the generated code untouched):
``(_restore, (module, class, source), state)``. Unpickling imports the source again (after
checking it against the hash in the name) before it sets the object's state. The source is
written once per pickle (pickle keeps one copy of a string however often it is referenced),
and nothing is read from or written to disk: a model saved on one machine loads on another
with taxcompile installed, ``torch.load(f, weights_only=False)`` as for any pickled module.
What does not carry its source is a generated class or function pickled on its own (not an
instance): that loads only in a process that has built the same module.

Unpickling runs the source stored in the pickle. The hash in the module's name detects a
source that does not match it by accident, not a changed file: whoever writes the pickle
writes both, so any Python in it runs on load. As PyTorch warns of ``weights_only=False``,
load only pickles you trust; for weights from elsewhere, load a ``state_dict()`` with
``torch.load(f, weights_only=True)`` into a model built from the spec here.

Stdlib only: importing this module imports no torch (the generated source does)."""

from __future__ import annotations

import copyreg
import dataclasses
import hashlib
import importlib.util
import linecache
import re
import sys
import threading
from types import ModuleType

__path__: list[str] = []  # a package: the generated modules are its submodules

HASH_LEN = 16
_NAME = re.compile(rf"{re.escape(__name__)}\.([A-Za-z_][A-Za-z0-9_]*)_([0-9a-f]{{{HASH_LEN}}})")
_LOCK = threading.Lock()


def digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:HASH_LEN]


def module_name(source: str, stem: str = "model") -> str:
    """``taxcompile.built.<stem>_<hash>``; ``stem`` reduced to an identifier."""
    stem = re.sub(r"\W", "_", stem, flags=re.ASCII) or "model"
    if stem[0].isdigit():
        stem = "_" + stem
    return f"{__name__}.{stem}_{digest(source)}"


def load(source: str, stem: str = "model") -> ModuleType:
    """The generated ``source`` as a module named ``module_name(source, stem)``: imported
    on the first call, the same module afterwards."""
    return _import(module_name(source, stem), source)


def _import(name: str, source: str) -> ModuleType:
    with _LOCK:
        mod = sys.modules.get(name)
        if mod is not None:
            return mod
        filename = f"<{name}>"
        # tracebacks and inspect.getsource read the lines from linecache (mtime None: kept)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        spec = importlib.util.spec_from_loader(name, loader=None, origin=filename)
        mod = importlib.util.module_from_spec(spec)
        mod.__file__ = filename
        sys.modules[name] = mod  # dataclasses look their module up while the class is built
        try:
            exec(compile(source, filename, "exec", dont_inherit=True), mod.__dict__)  # generated code, not a spec
        except BaseException:
            sys.modules.pop(name, None)
            linecache.cache.pop(filename, None)
            raise
        _register(mod, source)
        return mod


def _register(mod: ModuleType, source: str) -> None:
    """A reducer that carries ``source`` for every nn.Module subclass and dataclass the
    generated module defines (its Model, attention classes, Config, Output)."""
    import torch.nn as nn

    for obj in list(vars(mod).values()):
        if isinstance(obj, type) and obj.__module__ == mod.__name__ and (
                issubclass(obj, nn.Module) or dataclasses.is_dataclass(obj)):
            copyreg.pickle(obj, _reducer(mod.__name__, obj.__qualname__, source))


def _reducer(name: str, qualname: str, source: str):
    def reduce(obj):
        getstate = getattr(obj, "__getstate__", None)  # Python 3.10's object has none
        state = getstate() if getstate is not None else obj.__dict__
        return _restore, (name, qualname, source), state
    return reduce


def _restore(name: str, qualname: str, source: str):
    """An empty instance of ``qualname`` from module ``name``, importing ``source`` under
    that name first when this process has not (``pickle`` then sets the state). This runs
    ``source``: the hash check is no protection against a pickle written to do so."""
    m = _NAME.fullmatch(name)
    if m is None or m.group(2) != digest(source):
        raise ValueError(f"not a taxcompile-generated module: {name!r} (its name does not "
                         "match its source's hash)")
    cls = _import(name, source)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    return cls.__new__(cls)
