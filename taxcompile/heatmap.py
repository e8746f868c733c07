"""Attention heatmaps for the report: run a generated module on its ``example_inputs``
and draw each attention module's weights (matplotlib PNG).

Imports torch and matplotlib lazily; the front end never loads this module unless a
report is written."""

from __future__ import annotations

import io
import warnings

from .run import load_module

MAX_PANELS = 6


class HeatmapUnavailable(Exception):
    """torch or matplotlib is not installed."""


def weights(source: str, name: str, cm) -> dict:
    """Attention weights of the model on its example inputs, at toy sizes (Config.tiny()):
    module id -> (Lq, Lk) array of the first example, first group and first head."""
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is a test dependency
        raise HeatmapUnavailable("attention heatmaps need torch (pip install torch==2.13.0)") from e
    mod = load_module(source, name)
    torch.manual_seed(0)
    cfg = mod.Config.tiny()
    model = mod.Model(cfg).eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. torch's note on even convolution kernels
        out = model(**mod.example_inputs(cfg=cfg), return_attention=True)
    shown = {}
    for key, a in out.attention.items():
        if cm.model.node(key).dimensionality == "multi":
            a = a.mean(-1)  # (B, *groups, H, Lq, Lk): the mean weight over features
        for _ in range(1 + len(cm.attention[key].groups) + 1):
            a = a[0]  # the first example, first group, first head
        shown[key] = a.float().numpy()  # (Lq, Lk)
    return shown


def png(source: str, name: str, title: str, cm) -> bytes:
    """One PNG with a panel per attention module (the first hop of repeated ones)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover
        raise HeatmapUnavailable("attention heatmaps need matplotlib") from e
    maps = weights(source, name, cm)
    keys = [k for k in maps if "[" not in k or "[1]" in k and k.count("[") == k.count("[1]")]
    keys = (keys or list(maps))[:MAX_PANELS]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3.0), squeeze=False)
    for ax, key in zip(axes[0], keys):
        w = maps[key]
        im = ax.imshow(w, cmap="viridis", aspect="auto", vmin=0.0, vmax=max(float(w.max()), 1e-6),
                       interpolation="nearest")
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("key position", fontsize=8)
        ax.set_ylabel("query position" if w.shape[0] > 1 else "", fontsize=8)
        if w.shape[0] == 1:
            ax.set_yticks([])
        ax.tick_params(labelsize=7)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()
