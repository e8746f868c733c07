"""Attention heatmaps for the report: train a generated module briefly on a synthetic
task (``train.py``), run it on a batch of that task and draw each attention module's
weights (matplotlib PNG).

Imports torch and matplotlib lazily; the front end never loads this module unless a
report is written."""

from __future__ import annotations

import io
import textwrap
import warnings
from pathlib import Path

from .run import load_module

MAX_PANELS = 6
PANEL_W, PANEL_H = 3.4, 3.2  # inches per panel
DPI = 90
MAX_STRETCH = 12  # the most elongated a map is drawn (height:width or width:height)


class HeatmapUnavailable(Exception):
    """torch or matplotlib is not installed."""


def weights(source: str, name: str, cm, steps: int | None = None,
            cache: Path | None = None) -> tuple[dict, object]:
    """Attention weights of the model at toy sizes (Config.tiny()) after ``steps`` steps of
    its synthetic task (``train.train``; 0: untrained), on a batch of that task: module id
    -> (Lq, Lk) array of the first example, first group and first head; and the
    ``train.Trained`` record."""
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is a test dependency
        raise HeatmapUnavailable("attention heatmaps need torch (pip install torch==2.13.0)") from e
    from . import train

    mod = load_module(source, name)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # toy sizes: one thread is faster (and kinder to a busy machine)
    try:
        trained = train.train(mod, cm, source, train.STEPS if steps is None else steps, cache)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. torch's note on even convolution kernels
            out = trained.model(**trained.inputs, return_attention=True)
    finally:
        torch.set_num_threads(threads)
    shown = {}
    for key, a in out.attention.items():
        if cm.model.node(key).dimensionality == "multi":
            a = a.mean(-1)  # (B, *groups, H, Lq, Lk): the mean weight over features
        for _ in range(1 + len(cm.attention[key].groups) + 1):
            a = a[0]  # the first example, first group, first head
        shown[key] = a.float().numpy()  # (Lq, Lk)
    return shown, trained


def panels(maps: dict) -> list[str]:
    """The modules drawn: the first hop of repeated ones, at most ``MAX_PANELS``."""
    keys = [k for k in maps if "[" not in k or "[1]" in k and k.count("[") == k.count("[1]")]
    return (keys or list(maps))[:MAX_PANELS]


def _wrap(text: str, inches: float, fontsize: float) -> str:
    """Wrap ``text`` to lines that fit ``inches`` at ``fontsize`` (a generous 0.62 em per
    character for the default sans-serif font)."""
    chars = max(12, int(inches * 72 / (0.62 * fontsize)))
    return "\n".join(textwrap.wrap(text, chars, break_long_words=True,
                                   break_on_hyphens=False)) or text


def _aspect(shape: tuple) -> float:
    """imshow's aspect (a cell's height over its width): square cells, so that a 1 × 9 map
    is drawn as a strip, not a square; a map longer than 12:1 has its cells stretched so
    that it stays at least 1/12 as tall as wide (or as wide as tall)."""
    rows, cols = shape
    ratio = rows / cols
    return min(max(ratio, 1 / MAX_STRETCH), MAX_STRETCH) / ratio


def figure(maps: dict, title: str = ""):
    """The matplotlib figure: one panel per module in ``panels(maps)``, titles wrapped to
    their panel (and the figure title to the figure) so that no text leaves the image."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover
        raise HeatmapUnavailable("attention heatmaps need matplotlib") from e
    keys = panels(maps)
    width = PANEL_W * len(keys)
    fig, axes = plt.subplots(1, len(keys), figsize=(width, PANEL_H), squeeze=False,
                             layout="constrained", dpi=DPI)
    for ax, key in zip(axes[0], keys):
        w = maps[key]
        im = ax.imshow(w, cmap="viridis", aspect=_aspect(w.shape), vmin=0.0,
                       vmax=max(float(w.max()), 1e-6), interpolation="nearest")
        ax.set_title(_wrap(key, PANEL_W * 0.8, 9), fontsize=9)
        ax.set_xlabel("key position", fontsize=8)
        ax.set_ylabel("query position" if w.shape[0] > 1 else "", fontsize=8)
        if w.shape[0] == 1:
            ax.set_yticks([])
        ax.tick_params(labelsize=7)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if title:
        fig.suptitle(_wrap(title, width * 0.95, 10), fontsize=10)
    return fig


def png(maps: dict, title: str = "") -> bytes:
    """One PNG with a panel per attention module (the first hop of repeated ones)."""
    import matplotlib.pyplot as plt

    fig = figure(maps, title)
    buf = io.BytesIO()
    # "tight": the saved image grows to whatever text the layout could not fit
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None}, bbox_inches="tight",
                pad_inches=0.1)
    plt.close(fig)
    return buf.getvalue()
