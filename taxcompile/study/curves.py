"""Learning curves per dimension value: test accuracy against steps.

Per task and taxonomy dimension, one line per value of the dimension: the mean over the
seed results of the plain runs with that value, at each evaluation step, of their test
accuracy (``curve``). The runs of a value are those that differ from the task's base in
that dimension only (the base's own value: the base), or, where only one value has such
runs (a user's specs), every run with that value. A run that stopped early (it reached
the threshold) keeps its last accuracy to the end of the longest curve, as its model
would have been reported. One step budget and width per plot: the largest budget, the
first width (as the effects plot).

matplotlib is imported only to draw (optional)."""

from __future__ import annotations

import re

from ..classification import DIMENSIONS


def _cell(runs: list[dict]) -> tuple | None:
    cells = {((r["budget"] or 0), -(r["width"] or 0)) for r in runs}
    return max(cells) if cells else None


def lines(doc: dict, task: str, dimension: str) -> dict[str, list[tuple[int, float]]]:
    """value -> [(step, mean test accuracy)] of the plain runs of ``task`` (the values
    with a curve; a dimension with fewer than two has nothing to compare: {})."""
    runs = [r for r in doc["runs"] if r["task"] == task and not r["supervised"]
            and r.get("curve")]
    cell = _cell(runs)
    runs = [r for r in runs if ((r["budget"] or 0), -(r["width"] or 0)) == cell]
    base = doc["base"].get(task, {})
    others = [r for r in runs
              if all(r["row"].get(d) == v for d, v in base.items() if d != dimension)]
    groups: dict[str, list[dict]] = {}
    for r in others if len({r["row"].get(dimension) for r in others}) > 1 else runs:
        if dimension in r["row"]:
            groups.setdefault(r["row"][dimension], []).append(r)
    if len(groups) < 2:
        return {}
    out = {}
    for value, seeds in sorted(groups.items()):
        steps = sorted({int(t) for r in seeds for t, _ in r["curve"]})
        out[value] = [(t, sum(_at(r["curve"], t) for r in seeds) / len(seeds)) for t in steps]
    return out


def _at(curve: list, step: int) -> float:
    """The curve's accuracy at ``step``: its last evaluation at or before it (the first
    one before its first evaluation)."""
    got = curve[0][1]
    for t, a in curve:
        if t > step:
            break
        got = a
    return got


def plots(doc: dict) -> list[tuple[str, str]]:
    """(task, dimension) of every curve plot the document has, in a fixed order."""
    return [(task, d) for task in doc["base"] for d in DIMENSIONS if lines(doc, task, d)]


def name(task: str, dimension: str) -> str:
    return f"curves_{re.sub(r'[^A-Za-z0-9_-]+', '_', task)}_{dimension}.png"


def figure(doc: dict, task: str, dimension: str):
    """The matplotlib figure of one plot (one line per value), or None without
    matplotlib or without two values to compare."""
    got = lines(doc, task, dimension)
    if not got:
        return None
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    base = doc["base"].get(task, {}).get(dimension)
    for value, points in got.items():
        ax.plot([t for t, _ in points], [a for _, a in points], marker=".",
                label=value + (" (base)" if value == base else ""),
                color="black" if value == base else None)
    ax.set_xlabel("steps")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{task}: {dimension.replace('_', ' ')}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def png(doc: dict, task: str, dimension: str) -> bytes | None:
    import io

    fig = figure(doc, task, dimension)
    if fig is None:
        return None
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def links_md(doc: dict, task: str) -> list[str]:
    """The Markdown line that links one task's curve plots (written by ``-o``)."""
    got = [d for t, d in plots(doc) if t == task]
    if not got:
        return []
    return ["Learning curves (test accuracy against steps, one line per value): "
            + ", ".join(f"[{d.replace('_', ' ')}]({name(task, d)})" for d in got), ""]
