"""``taxcompile study report``: what a study file says about each taxonomy dimension.

Per task, the **base** is the model whose labels are, in every dimension, the value most
of the task's models share: in the slice (one factor varied at a time around one base
model) that is exactly the base model. The **effect** of a value of a dimension is
measured on the models that differ from the base in that dimension only ("others at
base"); where no such model was trained (a user's specs), on every model with that value
("marginal"). Every comparison is **paired by seed** (the seed fixes a task's data for
every model): per seed, the group's test accuracy minus the base's; the report gives the
mean difference, its 95 % paired t interval and the paired t test's p (``stats``). The
p-values of a report's effects are one family, adjusted by Holm's method; a value is
"above" or "below the base" only where its adjusted p is under 0.05, otherwise "no
difference shown". Beside the accuracy: the fraction of seeds that reached the threshold
(solved) and, among those, the mean steps to it — the early stop caps every solved run's
accuracy near the threshold, so among solved models the steps are the effect. An
**interaction** (the full profile's cross product covers them) is, per seed,
acc(a, b) - acc(a) - acc(b) + acc(base), tested the same way (its own Holm family).

No torch; matplotlib only for the PNG plots (optional)."""

from __future__ import annotations

import csv
import io
import math
import re
from collections import Counter
from pathlib import Path

from ..classification import DIMENSIONS, ORDER
from . import budget as B
from . import curves, permodel, stats
from .effects_plot import plot, plot_name  # noqa: F401 (the HTML report's names)

LEVEL = stats.LEVEL
ALPHA = stats.ALPHA  # the family-wise error rate Holm's adjustment keeps
ADJUST = "holm"
MEASURES = ("gold_mass", "gold_mass_answer", "aer", "aer_key", "comprehensiveness",
            "sufficiency", "uniform_drop")


def _mean(xs) -> float:
    return sum(xs) / len(xs)


def mean_ci(values: list[float]) -> tuple[float | None, list[float] | None]:
    """(mean, 95 % t interval) of ``values``; (None, None) when there are none."""
    if not values:
        return None, None
    return _mean(values), stats.t_interval(values)


# ---- the document ----------------------------------------------------------------------------


def _finite(x):
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _run_doc(r: dict, settings: dict) -> dict:
    return {
        "spec": r["source"], "model": r["model"], "model_hash": r["model_hash"],
        "row": {d: r["row"][d] for d in DIMENSIONS if d in r["row"]},
        "task": r["task"], "supervised": r["supervised"], "seed": r["seed"],
        "lr": r["lr"], "params": r["params"], "steps": r["steps"],
        "seconds": r["seconds"], "seconds_per_step": r["seconds_per_step"],
        "accuracy": _finite(r["accuracy"]), "final_loss": _finite(r["final_loss"]),
        "val_accuracy": _finite(r.get("val_accuracy")),
        "steps_to_threshold": r["steps_to_threshold"],
        # the step budget and width it trained under; a row of layout 2 has none: the
        # profile's (a --params-fitted width is then not known)
        "budget": r.get("budget") or settings.get("steps"),
        "width": r.get("width") or settings.get("d"),
        # (step, test accuracy) per evaluation; None in a file of layout 1 (protocol 1)
        "curve": None if r.get("curve") is None else [[int(t), a] for t, a in r["curve"]],
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
    answer = [r["attention"].get("gold_mass_answer") for r in seeds
              if r["attention"].get("gold_mass_answer") is not None]
    solved = [r["steps_to_threshold"] for r in seeds if r["steps_to_threshold"] is not None]
    acc_mean, acc_ci = mean_ci(acc)
    gold_mean, gold_ci = mean_ci(gold)
    return dict(n=len(acc), accuracy_mean=acc_mean, ci95=acc_ci, gold_mass_mean=gold_mean,
                gold_mass_ci95=gold_ci, n_gold=len(gold),
                gold_mass_answer_mean=_mean(answer) if answer else None,
                solved_fraction=len(solved) / len(seeds) if seeds else None,
                steps_to_threshold_mean=_mean(solved) if solved else None)


def _by_seed(seeds: list[dict]) -> dict[int, float]:
    """seed -> the mean accuracy of these runs on it (one run per seed in the slice)."""
    got: dict[int, list[float]] = {}
    for r in seeds:
        if r["accuracy"] is not None:
            got.setdefault(r["seed"], []).append(r["accuracy"])
    return {s: _mean(v) for s, v in got.items()}


def _paired(parts: list[list[dict]], signs: list[float]) -> dict:
    """The paired test of sum(sign * accuracy) per seed, over the seeds every part has."""
    per = [_by_seed(p) for p in parts]
    common = sorted(set.intersection(*(set(p) for p in per)))
    return stats.paired([sum(w * p[s] for p, w in zip(per, signs)) for s in common])


def _one_model(seeds: list[dict]) -> bool:
    return len({(r["spec"], r["model_hash"]) for r in seeds}) == 1


def _steps_paired(seeds: list[dict], base: list[dict]) -> dict:
    """Steps to threshold minus the base's, per seed where both reached it (one run per
    seed and side): the effect among solved models, described, never tested."""
    mine = {r["seed"]: r["steps_to_threshold"] for r in seeds}
    theirs = {r["seed"]: r["steps_to_threshold"] for r in base}
    common = sorted(s for s in set(mine) & set(theirs)
                    if mine[s] is not None and theirs[s] is not None)
    got = stats.paired([float(mine[s] - theirs[s]) for s in common])
    return dict(n_solved_pairs=got["n"], steps_diff_mean=got["diff_mean"],
                steps_diff_ci95=got["diff_ci95"])


def _verdict(e: dict) -> str:
    if e["p_adjusted"] is None:
        return "fewer than 2 paired seeds: no test"
    if e["p_adjusted"] >= ALPHA:
        return "no difference shown"
    return "above the base" if e["diff_mean"] > 0 else "below the base"


def _adjust(rows: list[dict], verdict) -> None:
    """Holm's adjusted p of every row's ``p`` (one family) and each row's verdict."""
    for row, q in zip(rows, stats.holm([r["p"] for r in rows])):
        row.update(p_adjusted=q, p_adjusted_method=ADJUST if q is not None else None)
        row["verdict"] = verdict(row)


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
    """(base row, effects, interactions) of one task's plain (unsupervised) runs of one
    step budget and width (every effect and interaction says which)."""
    cell = dict(budget=runs[0]["budget"], width=runs[0]["width"])
    models = _models(runs)
    rows = {k: seeds[0]["row"] for k, seeds in models.items()}
    marked = {k for k in models if SLICE.match(k[0]) and k[0].endswith(":base=base")}
    base = rows[min(marked)] if marked else base_row(list(rows.values()))
    groups: dict[frozenset, list[dict]] = {}  # the dimensions a model differs in -> seeds
    for k, seeds in models.items():
        is_base = k in marked if marked else not _differs(rows[k], base)
        groups.setdefault(_group(rows[k], base, k[0], is_base), []).extend(seeds)
    base_seeds = groups.get(frozenset(), [])
    effects = []
    for d in DIMENSIONS:
        values = {row[d] for row in rows.values() if d in row} | \
            {v for key in groups if len(key) == 1 for dd, v in key if dd == d}
        for v in sorted(values, key=lambda v: _order(d, v)):
            is_base = v == base.get(d)
            controlled = base_seeds if is_base else groups.get(frozenset({(d, v)}), [])
            seeds = controlled or [r for k, s in models.items() if rows[k].get(d) == v
                                   for r in s]
            test = dict(n=0, diff_mean=None, diff_ci95=None, p=None) if is_base or \
                not base_seeds else _paired([seeds, base_seeds], [1.0, -1.0])
            effects.append(dict(
                dimension=d, value=v, task=task, **cell, **_summary(seeds),
                models=len({(r["spec"], r["model_hash"]) for r in seeds}),
                comparison="others at base" if controlled else "marginal",
                n_pairs=test["n"], diff_mean=test["diff_mean"], diff_ci95=test["diff_ci95"],
                p=test["p"], is_base=is_base,
                **(_steps_paired(seeds, base_seeds) if not is_base
                   and _one_model(seeds) and _one_model(base_seeds) else
                   dict(n_solved_pairs=0, steps_diff_mean=None, steps_diff_ci95=None))))
    return base, effects, [i | cell for i in _interactions(task, groups)]


def _interactions(task: str, groups: dict) -> list[dict]:
    """Every pair of non-base values (of two dimensions) trained together with the other
    dimensions at base, where both single changes and the base were trained too: per
    seed, acc(a, b) - acc(a) - acc(b) + acc(base), paired t tested."""
    out = []
    base = groups.get(frozenset(), [])
    for key, seeds in groups.items():
        if len(key) != 2 or not base:
            continue
        (d1, v1), (d2, v2) = sorted(key, key=lambda dv: DIMENSIONS.index(dv[0]))
        a, b = groups.get(frozenset({(d1, v1)}), []), groups.get(frozenset({(d2, v2)}), [])
        if not (a and b and seeds):
            continue
        test = _paired([seeds, a, b, base], [1.0, -1.0, -1.0, 1.0])
        out.append(dict(task=task, dimensions=[d1, d2], values=[v1, v2], n=test["n"],
                        interaction=test["diff_mean"], ci95=test["diff_ci95"], p=test["p"]))
    return sorted(out, key=lambda x: (x["dimensions"], x["values"]))


def _supervision(runs: list[dict]) -> list[dict]:
    """Each model trained both ways on a task: gold mass and accuracy without and with
    ``penalty = supervised(gold, λ)``."""
    out = []
    by: dict[tuple, dict[bool, list[dict]]] = {}
    for r in runs:  # the slice's supervised twin is SOURCE:supervised (study/plan.py)
        key = (r["task"], r["spec"].removesuffix(":supervised"), r["model"], r["budget"] or 0,
               r["width"] or 0)
        by.setdefault(key, {}).setdefault(r["supervised"], []).append(r)
    for (task, spec, model, budget, width), ways in sorted(by.items()):
        if len(ways) == 2:
            plain, sup = _summary(ways[False]), _summary(ways[True])
            out.append(dict(task=task, spec=spec, model=model, budget=budget or None,
                            width=width or None, plain=plain, supervised=sup))
    return out


def document(store) -> dict:
    """The report of a study file as one json-able object."""
    settings = store.protocol.get("settings") or {}
    runs = [_run_doc(r, settings) for r in store.results()]
    bases, effects, interactions = {}, [], []
    # per task, step budget and width (``study run --steps``, ``--width``)
    for task, budget, width in sorted({(r["task"], r["budget"] or 0, r["width"] or 0)
                                       for r in runs}):
        # a score control is compared with its own base (permodel.score_controls)
        plain = [r for r in runs if (r["task"], r["budget"] or 0, r["width"] or 0)
                 == (task, budget, width) and not r["supervised"]
                 and not permodel.is_control(r["spec"])]
        if plain:
            base, e, i = _task_effects(task, plain)
            bases.setdefault(task, base)
            effects += e
            interactions += i
    tested = [e for e in effects if not e["is_base"]]
    _adjust(tested, _verdict)
    for e in effects:
        if e.pop("is_base"):
            e.update(p_adjusted=None, p_adjusted_method=None, verdict="base")
    B.learning(effects)
    _adjust(interactions, lambda i: "fewer than 2 paired seeds: no test"
            if i["p_adjusted"] is None else "interaction" if i["p_adjusted"] < ALPHA
            else "no interaction shown")
    family = dict(method=ADJUST, alpha=ALPHA, effects=sum(e["p"] is not None for e in tested),
                  interactions=sum(i["p"] is not None for i in interactions),
                  test="paired t test on the per-seed accuracy difference from the base",
                  interval="95 % paired t interval of the mean difference")
    return {"protocol": store.protocol, "statistics": family, "runs": runs,
            "skips": store.skips(), "base": bases, "effects": effects,
            "interactions": interactions, "supervision": _supervision(runs),
            "per_model": permodel.model_rows(runs),
            "score_controls": permodel.score_controls(runs)}


# ---- rendering -------------------------------------------------------------------------------


def num(x, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def ci(interval) -> str:
    return "–" if interval is None else f"[{interval[0]:.3f}, {interval[1]:.3f}]"


def to_json(doc: dict) -> str:
    """The report as JSON, checked against its published schema (``taxcompile schema study``)."""
    from ..schemas import dump

    return dump("study", doc) + "\n"


CSV_COLUMNS = ("task", "budget", "width", "dimension", "value", "comparison", "models", "n",
               "accuracy_mean", "ci95_low", "ci95_high", "solved_fraction",
               "steps_to_threshold_mean", "n_pairs", "diff_mean", "diff_ci95_low",
               "diff_ci95_high", "p", "p_adjusted", "p_adjusted_method", "n_solved_pairs",
               "steps_diff_mean", "gold_mass_mean", "gold_mass_ci95_low",
               "gold_mass_ci95_high", "verdict", "learning", "base_steps_to_threshold",
               "learning_why")


def to_csv(doc: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for e in doc["effects"]:
        ci, gci = e["ci95"] or [None, None], e["gold_mass_ci95"] or [None, None]
        dci = e["diff_ci95"] or [None, None]
        w.writerow([e["task"], e["budget"], e["width"], e["dimension"], e["value"],
                    e["comparison"], e["models"], e["n"],
                    e["accuracy_mean"], ci[0], ci[1], e["solved_fraction"],
                    e["steps_to_threshold_mean"], e["n_pairs"], e["diff_mean"], dci[0], dci[1],
                    e["p"], e["p_adjusted"], e["p_adjusted_method"], e["n_solved_pairs"],
                    e["steps_diff_mean"], e["gold_mass_mean"],
                    gci[0], gci[1], e["verdict"], e["learning"],
                    e["base_steps_to_threshold"], e["learning_why"]])
    return buf.getvalue()


MODEL_COLUMNS = ("task", "budget", "width", "model", "spec", "supervised", "n",
                 "accuracy_mean", "solved_fraction", "steps_to_threshold_mean",
                 "gold_mass_mean")


def models_csv(doc: dict) -> str:
    """One row per model (``per_model``): models.csv beside report.csv."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(MODEL_COLUMNS)
    w.writerows([m[c] for c in MODEL_COLUMNS] for m in doc.get("per_model", []))
    return buf.getvalue()


def pval(p) -> str:
    return "–" if p is None else "<0.001" if p < 0.001 else f"{p:.3f}"


def _protocol_md(protocol: dict) -> list[str]:
    out = [f"Protocol version {protocol.get('version')}, profile `{protocol.get('profile')}`."]
    if str(protocol.get("version")) == "1":
        out.append("(Protocol 1: one evaluation batch stopped training, chose the learning "
                   "rate and gave the accuracy; no learning curves.)")
    for k, v in sorted((protocol.get("settings") or {}).items()):
        if k == "batches" and isinstance(v, dict):  # one line per batch
            out.append("- batches:")
            out += [f"  - {name}: {b.get('size')} examples, stream {b.get('stream')}"
                    f"{': ' + b['use'] if b.get('use') else ''}" for name, b in v.items()
                    if isinstance(b, dict)]
        else:
            out.append(f"- {k}: {v}")
    return out


def _effects_md(effects: list[dict]) -> list[str]:
    """One task's effects: a table per step budget and width (one heading each where the
    task has several)."""
    out = []
    cells = sorted({(e["budget"] or 0, e["width"] or 0) for e in effects})
    for budget, width in cells:
        if len(cells) > 1:
            out += [f"### {budget} steps, width {width}", ""]
        out += ["| dimension | value | vs base | models | n | accuracy | 95 % CI | solved "
                "| steps | Δ steps | Δ accuracy | 95 % CI | p | p (Holm) | gold mass "
                "| 95 % CI | | learning |", "|" + " --- |" * 18]
        for e in effects:
            if ((e["budget"] or 0), (e["width"] or 0)) != (budget, width):
                continue
            out.append(f"| {e['dimension']} | {e['value']} | {e['comparison']} | {e['models']} "
                       f"| {e['n']} | {num(e['accuracy_mean'])} | {ci(e['ci95'])} "
                       f"| {num(e['solved_fraction'], 2)} "
                       f"| {num(e['steps_to_threshold_mean'], 0)} "
                       f"| {num(e['steps_diff_mean'], 0)} | {num(e['diff_mean'])} "
                       f"| {ci(e['diff_ci95'])} | {pval(e['p'])} | {pval(e['p_adjusted'])} "
                       f"| {num(e['gold_mass_mean'])} | {ci(e['gold_mass_ci95'])} "
                       f"| {e['verdict']} | {_learning_md(e)} |")
        out.append("")
    return out


def _learning_md(e: dict) -> str:
    if e["learning"] in (None, "base"):
        return "–" if e["learning"] is None else ""
    return e["learning"] + ("" if e["learning"] in ("faster", "as fast")
                            else f" ({e['learning_why']})")


def to_md(doc: dict) -> str:
    runs = doc["runs"]
    st = doc["statistics"]
    out = ["# Study report", ""] + _protocol_md(doc["protocol"]) + [
        "", f"{len(runs)} seed results of "
        f"{len({(r['spec'], r['model_hash'], r['task'], r['supervised']) for r in runs})} runs "
        f"on {len(doc['base'])} task(s); {len(doc['skips'])} skipped (model, task) pairs.", "",
        f"Each value against its task's base, paired by seed: Δ is the mean of the per-seed "
        f"accuracy differences, with its 95 % paired t interval and the paired t test's p; "
        f"p ({st['method'].capitalize()}) adjusts the {st['effects']} p-values of this "
        f"report's effects together, and a verdict says above or below only where it is "
        f"under {st['alpha']:g}. Solved: the fraction of seeds that reached the threshold; "
        f"steps: their mean steps to it; Δ steps: the mean difference in steps from the "
        f"base's, over the seeds both solved (described, not tested). Learning, across the "
        f"step budgets trained: faster, as fast or slower than the base to the threshold; "
        f"'seed-dependent' where some seeds reached it but fewer than half; 'does not "
        f"learn' only where no seed reached it at any tested budget and the largest was at "
        f"least {B.FACTOR}× the base's steps to the threshold, else 'slower' (not solved by "
        f"that budget).", ""]
    for task, base in doc["base"].items():
        out += [f"## {task}", "", "Base: " + ", ".join(f"{d} {v}" for d, v in base.items()), ""]
        out += _effects_md([e for e in doc["effects"] if e["task"] == task])
        out += ["Every model:", ""] + permodel.models_md(
            [m for m in doc.get("per_model", []) if m["task"] == task])
        controls = [c for c in doc.get("score_controls", []) if c["task"] == task]
        if controls:
            out += ["Score controls (each value against the base trained with the same "
                    "score, paired by seed; described, not in the Holm family):", ""]
            out += permodel.controls_md(controls)
        out += curves.links_md(doc, task)
        inter = [i for i in doc["interactions"] if i["task"] == task]
        out += ["Interactions: " + ("none covered (one factor varied at a time)"
                                        if not inter else ""), ""]
        if inter:
            out += ["| dimensions | values | n | interaction | 95 % CI | p | p (Holm) | |",
                    "|" + " --- |" * 8]
            out += [f"| {' × '.join(i['dimensions'])} | {' × '.join(i['values'])} | {i['n']} "
                    f"| {num(i['interaction'])} | {ci(i['ci95'])} | {pval(i['p'])} "
                    f"| {pval(i['p_adjusted'])} | {i['verdict']} |" for i in inter] + [""]
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


def write(doc: dict, out: Path) -> list[Path]:
    """report.md, report.csv, report.json, models.csv, an effects PNG per task and a
    learning-curve PNG per task and dimension into ``out``."""
    from ..files import write_all_atomic

    files: dict[Path, str | bytes] = {out / f"report.{k}": render(doc)
                                      for k, render in RENDER.items()}
    files[out / "models.csv"] = models_csv(doc)
    for task in doc["base"]:
        png = plot(doc, task)
        if png is not None:
            files[out / plot_name(task)] = png
    for task, dimension in curves.plots(doc):
        png = curves.png(doc, task, dimension)
        if png is not None:
            files[out / curves.name(task, dimension)] = png
    write_all_atomic(files)
    return list(files)
