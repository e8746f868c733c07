"""The effects plot of one task: accuracy and gold mass per value, with intervals, the
base's mean as a line (``study report -o``, the HTML report's study page). matplotlib is
imported only to draw (optional)."""

from __future__ import annotations

import io
import re


def plot(doc: dict, task: str) -> bytes | None:
    """A PNG of one task's effects (accuracy and gold mass, with intervals, the base's mean
    as a line); None when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    mine = [e for e in doc["effects"] if e["task"] == task and e["n"]]
    if mine:  # one step budget and width: the largest budget, the first width
        cell = max(((e["budget"] or 0), -(e["width"] or 0)) for e in mine)
        mine = [e for e in mine if ((e["budget"] or 0), -(e["width"] or 0)) == cell]
    # the base once, on top, then each value that differs from it
    effects = [e for e in mine if e["verdict"] == "base"][:1] + \
        [e for e in mine if e["verdict"] != "base"]
    labels = ["base" if e["verdict"] == "base" else f"{e['dimension']}: {e['value']}"
              for e in effects]
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.3 * len(effects) + 1.5), sharey=True)
    for ax, key, ci_key, title in ((axes[0], "accuracy_mean", "ci95", "accuracy"),
                                   (axes[1], "gold_mass_mean", "gold_mass_ci95", "gold mass")):
        for y, e in enumerate(effects):
            if e[key] is None:
                continue
            ci = e[ci_key] or [e[key], e[key]]
            ax.errorbar(e[key], y, xerr=[[e[key] - ci[0]], [ci[1] - e[key]]], fmt="o",
                        color="black" if e["verdict"] == "base" else "tab:blue", capsize=2)
            if e["verdict"] == "base":
                ax.axvline(e[key], color="grey", lw=0.8, ls="--")
        ax.set_title(f"{task}: {title} (95 % CI)", fontsize=9)
    axes[0].set_yticks(range(len(labels)), labels, fontsize=7)
    axes[0].invert_yaxis()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def plot_name(task: str) -> str:
    return f"effects_{re.sub(r'[^A-Za-z0-9_-]+', '_', task)}.png"
