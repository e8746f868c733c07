"""The report's rows per model and its score controls.

**Per model**: one row per trained model (task, step budget, width, spec, model, how it
was trained), named, whatever its Table III row: two of a user's models that share a row
are two rows here, where the effects pool them.

**Score controls**: a slice model trained again with another score than the base's
(``slice:TASK:DIMENSION=VALUE+scoring=SCORE``, study/models.py: pair_recall's co-attention
with the scaled dot product) is compared with the base trained with that score, seed by
seed, beside its own comparison with the additive base: the co-attention's effect with and
without the additive score's confound. Described (the paired mean, its t interval and p),
not part of the effects' Holm family.

No torch."""

from __future__ import annotations

import re

from . import stats

# a slice model with another score: its value's source, and the score
CONTROL = re.compile(r"^(slice:([^:]+):(\w+)=(\w+))\+scoring=(\w+)$")


def _mean(xs):
    return sum(xs) / len(xs) if xs else None


def _cell(r: dict) -> tuple:
    return (r["task"], r["budget"] or 0, r["width"] or 0)


def model_rows(runs: list[dict]) -> list[dict]:
    """One row per model per task, step budget, width and training, in a fixed order."""
    by: dict[tuple, list[dict]] = {}
    for r in runs:
        by.setdefault(_cell(r) + (r["supervised"], r["spec"], r["model"], r["model_hash"]),
                      []).append(r)
    out = []
    for (task, budget, width, sup, spec, model, _), seeds in sorted(by.items()):
        acc = [r["accuracy"] for r in seeds if r["accuracy"] is not None]
        gold = [r["attention"].get("gold_mass") for r in seeds
                if r["attention"].get("gold_mass") is not None]
        solved = [r["steps_to_threshold"] for r in seeds if r["steps_to_threshold"] is not None]
        out.append(dict(
            task=task, budget=budget or None, width=width or None, model=model, spec=spec,
            model_hash=seeds[0]["model_hash"], supervised=sup, row=dict(seeds[0]["row"]),
            n=len(acc), accuracy_mean=_mean(acc),
            ci95=stats.t_interval(acc) if len(acc) > 1 else None,
            solved_fraction=len(solved) / len(seeds),
            steps_to_threshold_mean=_mean(solved), gold_mass_mean=_mean(gold)))
    return out


def _by_seed(seeds: list[dict]) -> dict[int, float]:
    return {r["seed"]: r["accuracy"] for r in seeds if r["accuracy"] is not None}


def _paired(a: list[dict], b: list[dict]) -> dict:
    x, y = _by_seed(a), _by_seed(b)
    return stats.paired([x[s] - y[s] for s in sorted(set(x) & set(y))])


def score_controls(runs: list[dict]) -> list[dict]:
    """Per slice model trained with another score: its paired difference from the base
    with that score, beside its additive twin's from the additive base."""
    by: dict[tuple, list[dict]] = {}
    for r in runs:
        if not r["supervised"]:
            by.setdefault(_cell(r) + (r["spec"],), []).append(r)
    out = []
    for key, seeds in sorted(by.items()):
        m = CONTROL.match(key[3])
        if m is None or m.group(3) == "base":
            continue
        source, task, dim, value, score = m.groups()
        cell = key[:3]
        base = by.get(cell + (f"slice:{task}:base=base",), [])
        twin = by.get(cell + (source,), [])
        score_base = by.get(cell + (f"slice:{task}:base=base+scoring={score}",), [])
        sides = {}
        for name, mine, theirs in (("base_score", twin, base), ("score", seeds, score_base)):
            got = _paired(mine, theirs) if mine and theirs else None
            sides[name] = None if got is None else dict(
                model=mine[0]["model"], against=theirs[0]["model"], n=got["n"],
                diff_mean=got["diff_mean"], diff_ci95=got["diff_ci95"], p=got["p"])
        out.append(dict(task=task, budget=cell[1] or None, width=cell[2] or None,
                        dimension=dim, value=value, score=score,
                        with_base_score=sides["base_score"], with_score=sides["score"]))
    return out


def is_control(source: str) -> bool:
    """A model the score controls compare (not one of the effects' groups)."""
    m = CONTROL.match(source)
    return m is not None and m.group(3) != "base"


def _num(x, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _ci(c) -> str:
    return "–" if c is None else f"[{c[0]:.3f}, {c[1]:.3f}]"


def models_md(rows: list[dict]) -> list[str]:
    """One task's per-model table."""
    out = ["| model | spec | trained | steps | width | n | accuracy | 95 % CI | solved "
           "| steps to threshold | gold mass |", "|" + " --- |" * 11]
    out += [f"| {r['model']} | {r['spec']} | {'supervised' if r['supervised'] else 'plain'} "
            f"| {r['budget'] or '–'} | {r['width'] or '–'} | {r['n']} "
            f"| {_num(r['accuracy_mean'])} | {_ci(r['ci95'])} "
            f"| {_num(r['solved_fraction'], 2)} | {_num(r['steps_to_threshold_mean'], 0)} "
            f"| {_num(r['gold_mass_mean'])} |" for r in rows]
    return out + [""]


def controls_md(rows: list[dict]) -> list[str]:
    """One task's score controls."""
    out = ["| value | score | Δ accuracy, base's score | 95 % CI | p | Δ accuracy, this score "
           "| 95 % CI | p |", "|" + " --- |" * 8]
    for c in rows:
        a, b = c["with_base_score"] or {}, c["with_score"] or {}
        out.append(f"| {c['dimension']}: {c['value']} | {c['score']} "
                   f"| {_num(a.get('diff_mean'))} | {_ci(a.get('diff_ci95'))} "
                   f"| {_num(a.get('p'))} | {_num(b.get('diff_mean'))} "
                   f"| {_ci(b.get('diff_ci95'))} | {_num(b.get('p'))} |")
    return out + [""]
