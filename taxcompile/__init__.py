"""taxcompile: a taxonomy-driven compiler for attention models.

Pipeline: parser (text -> AST) -> lower (AST -> IR) -> checks (names, cycles, shapes)
-> graph (networkx) -> classification (Table III) -> table. The front end never imports torch.

The Python API (``api.py``, imported on first use so that ``import taxcompile`` stays
light): ``build(spec, model=None, **config)`` -> nn.Module, ``module(spec, model=None)``
-> the generated Python module, ``classify(spec, model=None)`` -> the row with its
reasons, ``diagram(spec, model=None)`` -> a graphviz.Digraph. ``spec`` is a path or
spec text. ``fit(model, data, …)`` trains a built model (``fitting.py``).
"""

__version__ = "0.1.0"
__all__ = ["build", "classify", "diagram", "fit", "module"]


def __getattr__(name: str):
    if name == "fit":
        from .fitting import fit

        return fit
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'taxcompile' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API (what tab completion offers), not only what has been imported."""
    return sorted([*__all__, "__version__"])
