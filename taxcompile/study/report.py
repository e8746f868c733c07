"""``taxcompile study report``: what a study file says about each taxonomy dimension.

Per task, the **base** is the model whose labels are, in every dimension, the value most
of the task's models share: in the slice (one factor varied at a time around one base
model) that is exactly the base model. The **effect** of a value of a dimension is the
mean over seeds of the models that differ from the base in that dimension only ("others
at base"); where no such model was trained (a user's specs), the mean over every model
with that value ("marginal"). Each mean comes with a 95 % percentile-bootstrap interval
over its seed results (seeded: the same file gives the same report), and a value whose
interval covers the base's mean is "not distinguishable from the base". An
**interaction** (the full profile's cross product covers them) is
acc(a, b) - acc(a) - acc(b) + acc(base) over the four groups, with its interval.

No torch; matplotlib only for the PNG plots (optional)."""

from __future__ import annotations

import csv
import io
import json
import math
import random
import re
from collections import Counter
from pathlib import Path

from ..classify import DIMENSIONS, ORDER

BOOTSTRAP = 2000  # resamples per interval
LEVEL = 0.95
SEED = 0  # the bootstrap's seed: a report is a pure function of its study file
MEASURES = ("gold_mass", "aer", "comprehensiveness", "sufficiency", "uniform_drop")


# ---- bootstrap -------------------------------------------------------------------------------


def _mean(xs) -> float:
    return sum(xs) / len(xs)


def bootstrap(groups: list[list[float]], weights: list[float], resamples: int = BOOTSTRAP,
              seed: int = SEED, level: float = LEVEL) -> list[float] | None:
    """The percentile-bootstrap ``level`` interval of sum(w_i * mean(group_i)), each group
    resampled with replacement on its own; None when a group has fewer than 2 values
    (one seed gives no interval)."""
    if any(len(g) < 2 for g in groups):
        return None
    rng = random.Random(seed)
    stats = sorted(sum(w * _mean(rng.choices(g, k=len(g))) for g, w in zip(groups, weights))
                   for _ in range(resamples))
    lo = stats[int(math.floor((1 - level) / 2 * resamples))]
    hi = stats[int(math.ceil((1 + level) / 2 * resamples)) - 1]
    return [lo, hi]


def mean_ci(values: list[float]) -> tuple[float | None, list[float] | None]:
    """(mean, 95 % interval) of ``values``; (None, None) when there are none."""
    if not values:
        return None, None
    return _mean(values), bootstrap([values], [1.0])


# ---- the document ----------------------------------------------------------------------------


def _finite(x):
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _run_doc(r: dict) -> dict:
    return {
        "spec": r["source"], "model": r["model"], "model_hash": r["model_hash"],
        "row": {d: r["row"][d] for d in DIMENSIONS if d in r["row"]},
        "task": r["task"], "supervised": r["supervised"], "seed": r["seed"],
        "lr": r["lr"], "params": r["params"], "steps": r["steps"],
        "seconds": r["seconds"], "seconds_per_step": r["seconds_per_step"],
        "accuracy": _finite(r["accuracy"]), "final_loss": _finite(r["final_loss"]),
        "steps_to_threshold": r["steps_to_threshold"],
        # the five measures (None where one does not apply), then any per-module detail
        "attention": {m: None for m in MEASURES}
        | {k: _finite(v) for k, v in r["attention"].items()},
        "engine": r["engine"],
    }


def _order(dimension: str, value: str) -> tuple:
    known = ORDER.get(dimension, ())
    first = value.split(" + ")[0]
    return (known.index(first) if first in known else len(known), value)


def base_row(rows: list[dict]) -> dict[str, str]:
    """Per dimension, the value most of these models share (ties: the survey's order)."""
    out = {}
    for d in DIMENSIONS:
        counts = Counter(r[d] for r in rows if d in r)
        if counts:
            out[d] = min(counts, key=lambda v: (-counts[v], _order(d, v)))
    return out


def _models(runs: list[dict]) -> dict[tuple, list[dict]]:
    """(spec, model hash) -> the seed results of that model."""
    out: dict[tuple, list[dict]] = {}
    for r in runs:
        out.setdefault((r["spec"], r["model_hash"]), []).append(r)
    return out


def _differs(row: dict, base: dict) -> set[str]:
    return {d for d in base if row.get(d) != base[d]}


def _summary(seeds: list[dict]) -> dict:
    acc = [r["accuracy"] for r in seeds if r["accuracy"] is not None]
    gold = [r["attention"]["gold_mass"] for r in seeds
            if r["attention"]["gold_mass"] is not None]
    acc_mean, acc_ci = mean_ci(acc)
    gold_mean, gold_ci = mean_ci(gold)
    return dict(n=len(acc), accuracy_mean=acc_mean, ci95=acc_ci, gold_mass_mean=gold_mean,
                gold_mass_ci95=gold_ci, n_gold=len(gold))


def _verdict(s: dict, base_mean: float | None, is_base: bool) -> str:
    if is_base:
        return "base"
    if s["ci95"] is None or base_mean is None:
        return "fewer than 2 seeds: no interval"
    lo, hi = s["ci95"]
    if lo <= base_mean <= hi:
        return "not distinguishable from the base"
    return "above the base" if lo > base_mean else "below the base"


# the slice's sources (study/models.py): "slice:TASK:DIMENSION=VALUE", the base as base=base
SLICE = re.compile(r"^slice:[^:]+:(\w+)=(\w+)$")


def _group(row: dict, base: dict, source: str, is_base: bool) -> frozenset:
    """The (dimension, value) pairs in which a model differs from the base. A slice model
    whose swap the eight labels do not tell apart (a sigmoid gate is Global, as softmax)
    is its own value, ``LABEL (swap)``, of the dimension it swapped, never the base."""
    diff = frozenset((d, row[d]) for d in _differs(row, base))
    m = SLICE.match(source)
    if diff or is_base or m is None or m.group(1) not in base:
        return diff
    return frozenset({(m.group(1), f"{row[m.group(1)]} ({m.group(2)})")})


def _task_effects(task: str, runs: list[dict]) -> tuple[dict, list[dict], list[dict]]:
    """(base row, effects, interactions) of one task's plain (unsupervised) runs."""
    models = _models(runs)
    rows = {k: seeds[0]["row"] for k, seeds in models.items()}
    marked = {k for k in models if SLICE.match(k[0]) and k[0].endswith(":base=base")}
    base = rows[min(marked)] if marked else base_row(list(rows.values()))
    groups: dict[frozenset, list[dict]] = {}  # the dimensions a model differs in -> seeds
    for k, seeds in models.items():
        is_base = k in marked if marked else not _differs(rows[k], base)
        groups.setdefault(_group(rows[k], base, k[0], is_base), []).extend(seeds)
    base_seeds = groups.get(frozenset(), [])
    base_sum = _summary(base_seeds)
    effects = []
    for d in DIMENSIONS:
        values = {row[d] for row in rows.values() if d in row} | \
            {v for key in groups if len(key) == 1 for dd, v in key if dd == d}
        for v in sorted(values, key=lambda v: _order(d, v)):
            is_base = v == base.get(d)
            controlled = base_seeds if is_base else groups.get(frozenset({(d, v)}), [])
            seeds = controlled or [r for k, s in models.items() if rows[k].get(d) == v
                                   for r in s]
            s = _summary(seeds)
            effects.append(dict(
                dimension=d, value=v, task=task, **s,
                models=len({(r["spec"], r["model_hash"]) for r in seeds}),
                comparison="others at base" if controlled else "marginal",
                delta_accuracy=None if s["accuracy_mean"] is None
                or base_sum["accuracy_mean"] is None
                else s["accuracy_mean"] - base_sum["accuracy_mean"],
                verdict=_verdict(s, base_sum["accuracy_mean"], is_base)))
    return base, effects, _interactions(task, base, groups)


def _acc(seeds: list[dict]) -> list[float]:
    return [r["accuracy"] for r in seeds if r["accuracy"] is not None]


def _interactions(task: str, base: dict, groups: dict) -> list[dict]:
    """Every pair of non-base values (of two dimensions) trained together with the other
    dimensions at base, where both single changes and the base were trained too."""
    out = []
    base_acc = _acc(groups.get(frozenset(), []))
    for key, seeds in groups.items():
        if len(key) != 2 or not base_acc:
            continue
        (d1, v1), (d2, v2) = sorted(key, key=lambda dv: DIMENSIONS.index(dv[0]))
        a, b = _acc(groups.get(frozenset({(d1, v1)}), [])), _acc(groups.get(frozenset({(d2, v2)}), []))
        ab = _acc(seeds)
        if not (a and b and ab):
            continue
        parts, signs = [ab, a, b, base_acc], [1.0, -1.0, -1.0, 1.0]
        value = sum(w * _mean(g) for g, w in zip(parts, signs))
        ci = bootstrap(parts, signs)
        out.append(dict(task=task, dimensions=[d1, d2], values=[v1, v2], n=len(ab),
                        interaction=value, ci95=ci,
                        verdict="fewer than 2 seeds: no interval" if ci is None else
                        "no interaction distinguishable" if ci[0] <= 0 <= ci[1] else
                        "interaction"))
    return sorted(out, key=lambda x: (x["dimensions"], x["values"]))


def _supervision(runs: list[dict]) -> list[dict]:
    """Each model trained both ways on a task: gold mass and accuracy without and with
    ``penalty = supervised(gold, λ)``."""
    out = []
    by: dict[tuple, dict[bool, list[dict]]] = {}
    for r in runs:  # the slice's supervised twin is SOURCE:supervised (study/plan.py)
        key = (r["task"], r["spec"].removesuffix(":supervised"), r["model"])
        by.setdefault(key, {}).setdefault(r["supervised"], []).append(r)
    for (task, spec, model), ways in sorted(by.items()):
        if len(ways) == 2:
            plain, sup = _summary(ways[False]), _summary(ways[True])
            out.append(dict(task=task, spec=spec, model=model, plain=plain, supervised=sup))
    return out


def document(store) -> dict:
    """The report of a study file as one json-able object."""
    runs = [_run_doc(r) for r in store.results()]
    tasks = sorted({r["task"] for r in runs})
    bases, effects, interactions = {}, [], []
    for task in tasks:
        plain = [r for r in runs if r["task"] == task and not r["supervised"]]
        if plain:
            bases[task], e, i = _task_effects(task, plain)
            effects += e
            interactions += i
    return {"protocol": store.protocol, "runs": runs, "skips": store.skips(), "base": bases,
            "effects": effects, "interactions": interactions,
            "supervision": _supervision(runs)}


# ---- rendering -------------------------------------------------------------------------------


def num(x, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def ci(interval) -> str:
    return "–" if interval is None else f"[{interval[0]:.3f}, {interval[1]:.3f}]"


def to_json(doc: dict) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


CSV_COLUMNS = ("task", "dimension", "value", "comparison", "models", "n", "accuracy_mean",
               "ci95_low", "ci95_high", "delta_accuracy", "gold_mass_mean", "gold_mass_ci95_low",
               "gold_mass_ci95_high", "verdict")


def to_csv(doc: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for e in doc["effects"]:
        ci, gci = e["ci95"] or [None, None], e["gold_mass_ci95"] or [None, None]
        w.writerow([e["task"], e["dimension"], e["value"], e["comparison"], e["models"], e["n"],
                    e["accuracy_mean"], ci[0], ci[1], e["delta_accuracy"], e["gold_mass_mean"],
                    gci[0], gci[1], e["verdict"]])
    return buf.getvalue()


def _protocol_md(protocol: dict) -> list[str]:
    out = [f"Protocol version {protocol.get('version')}, profile `{protocol.get('profile')}`."]
    for k, v in sorted((protocol.get("settings") or {}).items()):
        out.append(f"- {k}: {v}")
    return out


def to_md(doc: dict) -> str:
    runs = doc["runs"]
    out = ["# Study report", ""] + _protocol_md(doc["protocol"]) + [
        "", f"{len(runs)} seed results of "
        f"{len({(r['spec'], r['model_hash'], r['task'], r['supervised']) for r in runs})} runs "
        f"on {len(doc['base'])} task(s); {len(doc['skips'])} skipped (model, task) pairs.", ""]
    for task, base in doc["base"].items():
        out += [f"## {task}", "", "Base: " + ", ".join(f"{d} {v}" for d, v in base.items()), "",
                "| dimension | value | vs base | models | n | accuracy | 95 % CI | Δ accuracy "
                "| gold mass | 95 % CI | |", "|" + " --- |" * 11]
        for e in (e for e in doc["effects"] if e["task"] == task):
            out.append(f"| {e['dimension']} | {e['value']} | {e['comparison']} | {e['models']} "
                       f"| {e['n']} | {num(e['accuracy_mean'])} | {ci(e['ci95'])} "
                       f"| {num(e['delta_accuracy'])} | {num(e['gold_mass_mean'])} "
                       f"| {ci(e['gold_mass_ci95'])} | {e['verdict']} |")
        inter = [i for i in doc["interactions"] if i["task"] == task]
        out += ["", "Interactions: " + ("none covered (one factor varied at a time)"
                                        if not inter else ""), ""]
        if inter:
            out += ["| dimensions | values | n | interaction | 95 % CI | |", "|" + " --- |" * 6]
            out += [f"| {' × '.join(i['dimensions'])} | {' × '.join(i['values'])} | {i['n']} "
                    f"| {num(i['interaction'])} | {ci(i['ci95'])} | {i['verdict']} |"
                    for i in inter] + [""]
    if doc["supervision"]:
        out += ["## Supervised attention", "", "| task | model | gold mass | supervised "
                "| accuracy | supervised |", "|" + " --- |" * 6]
        out += [f"| {s['task']} | {s['model']} | {num(s['plain']['gold_mass_mean'])} "
                f"| {num(s['supervised']['gold_mass_mean'])} "
                f"| {num(s['plain']['accuracy_mean'])} "
                f"| {num(s['supervised']['accuracy_mean'])} |" for s in doc["supervision"]]
        out.append("")
    if doc["skips"]:
        out += ["## Skipped", ""] + [f"- {s['source']}: model {s['model']}"
                                     f"{' on ' + s['task'] if s['task'] else ''}: {s['why']}"
                                     for s in doc["skips"]] + [""]
    return "\n".join(out) + "\n"


RENDER = {"md": to_md, "csv": to_csv, "json": to_json}


# ---- files and plots -------------------------------------------------------------------------


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


def write(doc: dict, out: Path) -> list[Path]:
    """report.md, report.csv, report.json and a PNG per task into ``out``."""
    from ..files import write_all_atomic

    files: dict[Path, str | bytes] = {out / f"report.{k}": render(doc)
                                      for k, render in RENDER.items()}
    for task in doc["base"]:
        png = plot(doc, task)
        if png is not None:
            files[out / plot_name(task)] = png
    write_all_atomic(files)
    return list(files)
