"""The literature's experiments as figures: accuracy against width, one line per mixer
(zoology's figure 2), and a table of every (task, mixer, width) with the seeds' mean.

``python -m taxcompile.study.lit_report STUDY.db -o DIR`` writes ``DIR/literature.png``
(one panel per task the file holds at several widths) and
``DIR/literature.md``. Reads a study file's results as ``study report`` does."""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from . import tasks as T
from .lit_models import MIXERS
from .runs import StudyError

STYLE = {"attention": ("C0", "o"), "conv": ("C1", "s"), "recurrent": ("C2", "^")}


def table(results: list[dict]) -> list[dict]:
    """One row per (task, mixer, width) of the literature's runs: the seeds' accuracies,
    their mean, min and max, and the steps to the threshold of the seeds that reached it."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        if r["task"] not in T.LIT_TASKS or not r["model"].startswith("lit_"):
            continue
        mixer = r["model"].removeprefix("lit_")
        groups.setdefault((r["task"], mixer, r.get("width")), []).append(r)
    rows = []
    for (task, mixer, width), rs in groups.items():
        acc = [r["accuracy"] for r in rs]
        steps = [r["steps_to_threshold"] for r in rs if r["steps_to_threshold"] is not None]
        rows.append(dict(task=task, mixer=mixer, width=width, seeds=len(rs),
                         accuracy=sum(acc) / len(acc), low=min(acc), high=max(acc),
                         solved=len(steps), steps=sum(steps) / len(steps) if steps else None,
                         params=rs[0]["params"]))
    order = {m: i for i, m in enumerate(MIXERS)}
    names = list(T.LIT_TASKS)
    return sorted(rows, key=lambda r: (names.index(r["task"]), order.get(r["mixer"], 9),
                                       r["width"] or 0))


def figure(rows: list[dict], tasks: list[str] | None = None) -> bytes | None:
    """PNG: per task a panel of accuracy (seeds' mean, min-max band) against width (log
    scale), one line per mixer; None without matplotlib or rows."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    tasks = tasks or list(dict.fromkeys(r["task"] for r in rows))
    tasks = [t for t in tasks if any(r["task"] == t for r in rows)]
    if not tasks:
        return None
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.6 * len(tasks), 3.2), squeeze=False,
                             sharey=True)
    for ax, task in zip(axes[0], tasks):
        info = T.TASKS[task]
        for mixer in MIXERS:
            pts = [r for r in rows if r["task"] == task and r["mixer"] == mixer]
            if not pts:
                continue
            color, marker = STYLE.get(mixer, ("k", "x"))
            w = [r["width"] for r in pts]
            ax.plot(w, [r["accuracy"] for r in pts], marker=marker, color=color, label=mixer)
            ax.fill_between(w, [r["low"] for r in pts], [r["high"] for r in pts],
                            color=color, alpha=0.15)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{task}\nV {info.vocab}, L {info.L}"
                     + (f", {info.pairs} pairs" if info.kind == "zoology_mqar" else ""),
                     fontsize=9)
        ax.set_xlabel("width d")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def markdown(rows: list[dict]) -> str:
    out = ["| task | mixer | width | parameters | seeds | accuracy (mean) | min–max | "
           "solved | steps to 0.99 |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        steps = "–" if r["steps"] is None else f"{r['steps']:.0f}"
        out.append(f"| {r['task']} | {r['mixer']} | {r['width']} | {r['params']:,} | "
                   f"{r['seeds']} | {r['accuracy']:.3f} | {r['low']:.3f}–{r['high']:.3f} | "
                   f"{r['solved']}/{r['seeds']} | {steps} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m taxcompile.study.lit_report",
                                description="the literature's tasks: figure and table")
    p.add_argument("db", help="a study file (taxcompile study run --profile literature)")
    p.add_argument("-o", "--out", required=True, help="folder for literature.png and .md")
    a = p.parse_args(argv)
    from .store import Store

    try:
        with Store.read(a.db) as store:
            rows = table(store.results())
    except StudyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: {a.db} holds no run of the literature's tasks", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "literature.md").write_text(markdown(rows), encoding="utf-8")
    # a panel per task swept over widths (a task at one width is a row of the table)
    swept = [t for t in dict.fromkeys(r["task"] for r in rows)
             if len({r["width"] for r in rows if r["task"] == t}) > 1]
    png = figure(rows, swept or None)
    if png:
        (out / "literature.png").write_bytes(png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
