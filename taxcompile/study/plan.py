"""``plan``: a profile (or users' specs) -> the runs and the skips, in a fixed order.

Which tasks a model can run follows from its checked IR: the tasks' interface
(``tasks``) is an input ``x: tokens[L]`` (vocabulary at least ``V``, ``L`` free or the
task's), optionally ``q: tokens[T]`` (without it the model makes one prediction per
example, which only the one-query tasks score) and ``gold: alignment[…]`` (then it is
trained with its supervised penalty), and one output whose last axis holds at least
``V`` classes. A model that does not fit a task is a ``Skip`` that says why.

``steps`` and ``widths`` (``study run --steps 150,600 --width 16,32``) multiply the runs:
every model at every width, trained under every step budget; each run records both, and
the report groups its effects by them (docs/study.md, "Budget apart from mechanism").

Torch-free unless ``params`` is given (the width is then fitted by counting the
parameters of the generated model) or a user's spec is swept over ``widths``."""

from __future__ import annotations

from dataclasses import replace

from . import fit as F
from . import models as Mdl
from . import tasks as T
from .loadspec import check as _check
from .protocol import Profile, profile
from .runs import Run, Skip, StudyError

TOLERANCE = 0.10  # ``params``: every model within 10 % of the target
WIDTHS = (2, 2048)  # ``params``: the even widths d searched


def _tasks(prof: Profile, tasks: list[str] | None) -> list[str]:
    names = list(tasks) if tasks else list(prof.tasks)
    for n in names:
        if n not in T.TASKS:
            raise StudyError(f"unknown task `{n}`", f"the tasks are {', '.join(T.TASKS)}")
    return names


def count_params(text: str, model: str, config: tuple = ()) -> int:
    """Parameters of ``model`` of spec ``text`` at its Config defaults, with ``config``'s
    fields set (imports torch)."""
    import torch

    from .runner import build

    b = build(Run("params", text, model, "copy", (0,), (0.0,), "smoke", config=config))
    torch.manual_seed(0)
    return sum(p.numel() for p in b.mod.Model(b.cfg).parameters())


def counter(text: str, model: str, config: tuple = ()):
    """``count(d)``: the parameters of ``model`` of spec ``text`` with its Config field
    ``d`` set (and ``config``'s), from one build; counted on the meta device (no memory,
    no initialisation) where the model allows it."""
    import torch

    from .runner import build

    b = build(Run("params", text, model, "copy", (0,), (0.0,), "smoke", config=config))

    def count(d: int) -> int:
        cfg = b.mod.Config(**dict(config, d=d))
        try:
            with torch.device("meta"):
                m = b.mod.Model(cfg)
        except Exception:  # an initialiser that needs real values
            torch.manual_seed(0)
            m = b.mod.Model(cfg)
        return sum(p.numel() for p in m.parameters())

    return count


def _range(count, target: int) -> str | None:
    """Why no width in ``WIDTHS`` can come within ``TOLERANCE`` of ``target`` (two counts,
    the ends: the count grows with d); None when one may."""
    low, high = WIDTHS
    if count(low) > target * (1 + TOLERANCE):
        return f"it has {count(low):,} parameters at its smallest width ({low}), " \
               f"more than {target:,} + {TOLERANCE:.0%}"
    if count(high) < target * (1 - TOLERANCE):
        return f"it has {count(high):,} parameters at its largest width ({high}), " \
               f"fewer than {target:,} - {TOLERANCE:.0%}"
    return None


def _fit(count, target: int) -> int | None:
    """The even width d whose ``count(d)`` (growing with d) is nearest ``target``, or None
    when none lands within ``TOLERANCE`` of it."""
    lo, hi = WIDTHS[0] // 2, WIDTHS[1] // 2  # widths 2·lo .. 2·hi
    while lo < hi:
        mid = (lo + hi) // 2
        if count(2 * mid) < target:
            lo = mid + 1
        else:
            hi = mid
    best = min({max(1, lo - 1), lo}, key=lambda w: abs(count(2 * w) - target))
    return 2 * best if abs(count(2 * best) - target) <= TOLERANCE * target else None


def fit_width(m: Mdl.Model, supervised: bool, target: int) -> Mdl.Model | str:
    """``m`` at the even width whose parameter count is nearest ``target``, or why no
    width lands within ``TOLERANCE`` of it."""
    from dataclasses import replace

    count = counter(Mdl.spec_text(m, supervised), m.name)
    why = _range(count, target)
    if why:
        return why
    d = _fit(count, target)
    return f"no width puts it within {TOLERANCE:.0%} of {target:,} parameters" if d is None \
        else replace(m, d=d)


def fit_user(text: str, model: str, target: int, config: tuple = ()) -> tuple | str:
    """A user's model fitted to ``target`` parameters through its Config field ``d`` (its
    `let d`), the task's ``config`` set: the Config fields to set, or why it cannot be."""
    from .runner import build

    b = build(Run("params", text, model, "copy", (0,), (0.0,), "smoke", config=config))
    if not isinstance(getattr(b.cfg, "d", None), int):
        return "the spec has no `let d` (an integer width) to fit to --params"
    count = counter(text, model, config)
    why = _range(count, target)
    if why:
        return why
    d = _fit(count, target)
    if d is None:
        return f"no width d puts it within {TOLERANCE:.0%} of {target} parameters"
    return (("d", d),)


def _slice(prof: Profile, names: list[str], params: int | None,
           widths: list[int] | None = None):
    runs: list[Run] = []
    skips: list[Skip] = []
    for task in names:
        if T.TASKS[task].family == "lm":  # the literature's tasks: their own models
            from . import lit_models

            got = lit_models.plan_runs(prof, task, widths or [prof.d], params)
            runs, skips = runs + got[0], skips + got[1]
            continue
        for m in [m for w in widths or [prof.d] for m in Mdl.slice_models(task, w, full=prof.full)]:
            why = Mdl.misfit(m)
            if why:
                skips.append(Skip(m.source, m.name, task, why))
                continue
            variants = [False] + ([True] if prof.supervised and m.dimension == "base" else [])
            for sup in variants:
                # the source names the model; ``supervised`` says how it was trained
                source = m.source
                if sup and Mdl.unsupervisable(m):
                    skips.append(Skip(source, m.name, task, "supervised: " +
                                      Mdl.unsupervisable(m)))
                    continue
                text = Mdl.spec_text(m, sup)
                cs, why = _check(text, source)
                if cs is None:
                    skips.append(Skip(source, m.name, task, ("supervised: " if sup else "") + why))
                    continue
                width = m.d
                if params is not None:
                    fitted = fit_width(m, sup, params)
                    if isinstance(fitted, str):
                        skips.append(Skip(source, m.name, task, "--params: " + fitted))
                        continue
                    text, width = Mdl.spec_text(fitted, sup), fitted.d
                runs.append(Run(source, text, m.name, task, prof.seeds, prof.lrs, prof.name, sup,
                                width=width))
    return runs, skips


def misfit_user(cs, cm, task: str, inputs: tuple = (), sets: tuple = ()) -> str | None:
    """Why the user's checked model ``cm`` cannot run ``task`` (None: it can)."""
    got = F.fit(cs, cm, task, inputs, sets)
    return got if isinstance(got, str) else None


def _user_widths(text: str, model: str, widths: list[int] | None,
                 config: tuple = ()) -> list[tuple] | str:
    """The Config fields of each width of ``widths`` (through the spec's `let d`), or why
    the spec cannot be swept; [()] (the spec's own width) without ``widths``."""
    if widths is None:
        return [()]
    from .runner import build

    b = build(Run("params", text, model, "copy", (0,), (0.0,), "smoke", config=config))
    if not isinstance(getattr(b.cfg, "d", None), int):
        return "the spec has no `let d` (an integer width) to set to --width"
    return [(("d", w),) for w in widths]


def _sizes(text: str, name: str, fits: dict, params, widths) -> list[tuple] | str:
    """The width settings of one user model (--params, --width), or why there are none."""
    if not fits:
        return [()]
    config = next(iter(fits.values())).config  # the task's vocabulary and classes
    if params is not None:
        got = fit_user(text, name, params, config)
        return got if isinstance(got, str) else [got]
    return _user_widths(text, name, widths, config)


def _user(prof: Profile, specs: list[str], names: list[str], params: int | None,
          widths: list[int] | None = None, inputs: tuple = (), sets: tuple = ()):
    from .. import pipeline
    from ..diagnostics import SpecError

    runs: list[Run] = []
    skips: list[Skip] = []
    for path, _ in pipeline.expand(specs):
        try:
            file, text = pipeline.parse_file(path)
            cs = pipeline.load_text(text, file)
        except (OSError, SpecError) as e:
            raise StudyError(f"{path}: {str(e).splitlines()[0]}",
                             "run `taxcompile check` on it") from None
        for cm in cs.models:
            name = cm.model.name
            got = {task: F.fit(cs, cm, task, inputs, sets) for task in names}
            fits = {t: f for t, f in got.items() if not isinstance(f, str)}
            why_all = [(t, f) for t, f in got.items() if isinstance(f, str)]
            sizes = _sizes(text, name, fits, params, widths)
            if isinstance(sizes, str):
                skips.append(Skip(str(path), name, None, sizes))
                continue
            sup = any(n.kind_ == "input" and n.id == "gold" for n in cm.model.nodes)
            for task, f in fits.items():
                runs += [Run(str(path), text, name, task, prof.seeds, prof.lrs, prof.name, sup,
                             tuple(sorted(dict(f.config, **dict(size)).items())),
                             width=dict(size).get("d"), inputs=f.inputs) for size in sizes]
            if not fits:
                skips.append(Skip(str(path), name, None, "no task fits: " + "; ".join(
                    f"{task}: {why}" for task, why in why_all)))
            else:  # each task it does not fit, with its reason (the plan and report list them)
                skips += [Skip(str(path), name, task, why) for task, why in why_all]
    if not runs:
        whys = "; ".join(f"{s.source} model `{s.model}`: {s.why}" for s in skips)
        raise StudyError(f"no task fits the given specs ({whys})", F.NEEDS)
    return runs, skips


def _budgets(runs: list[Run], prof: Profile, steps: list[int] | None) -> list[Run]:
    """Every run under every step budget of ``steps`` (the profile's: ``budget`` None)."""
    if not steps:
        return runs
    budgets = [None if n == prof.steps else n for n in dict.fromkeys(steps)]
    return [replace(r, budget=b) for r in runs for b in budgets]


def _sweep_check(steps: list[int] | None, widths: list[int] | None,
                 params: int | None) -> None:
    for flag, values in (("--steps", steps), ("--width", widths)):
        if values is not None and (not values or min(values) <= 0):
            raise StudyError(f"{flag} takes positive whole numbers, got {values}")
    if widths is not None and params is not None:
        raise StudyError("--width and --params both set the width", "give one of them")


def plan(name: str, specs: list[str] | None = None, params: int | None = None,
         tasks: list[str] | None = None, steps: list[int] | None = None,
         widths: list[int] | None = None, inputs: tuple = (),
         sets: tuple = ()) -> tuple[list[Run], list[Skip]]:
    prof = profile(name)
    names = _tasks(prof, tasks)
    if params is not None and params <= 0:
        raise StudyError(f"--params must be positive, got {params}")
    _sweep_check(steps, widths, params)
    for flag, given in (("--input", inputs), ("--set", sets)):
        if given and not specs:
            raise StudyError(f"{flag} applies to your own specs; the study's models take "
                             "none", f"name your .attn files, or leave out {flag}")
    if "d" in dict(sets) and (widths is not None or params is not None):
        raise StudyError("--set d and --width or --params all set the width", "give one")
    if specs:
        runs, skips = _user(prof, specs, names, params, widths, inputs, sets)
        return _budgets(runs, prof, steps), skips
    runs, skips = _slice(prof, names, params, list(dict.fromkeys(widths or [prof.d])))
    if params is not None and not runs:
        first = next((s for s in skips if s.why.startswith("--params: ")), None)
        raise StudyError(f"--params {params:,}: no model of the study comes within "
                         f"{TOLERANCE:.0%} of it at any width from {WIDTHS[0]} to {WIDTHS[1]}"
                         + (f" (model {first.model} on {first.task}: "
                            f"{first.why.removeprefix('--params: ')})" if first else ""),
                         "choose a parameter count within the models' range")
    return _budgets(runs, prof, steps), skips


def coverage(runs: list[Run]) -> dict[str, set[str]]:
    """Table III labels of the five per-module dimensions that the runs cover (from each
    run's checked model, as classify derives them)."""
    from .. import pipeline
    from ..classification import classify_model

    seen: dict[str, set[str]] = {d: set() for d in Mdl.DIMENSIONS}
    for r in runs:
        cs = pipeline.load_text(r.spec, r.source)
        cm = next(m for m in cs.models if m.model.name == r.model)
        c = classify_model(cm)
        for d in Mdl.DIMENSIONS:
            seen[d].update(c.cells[d].values)
    return seen

