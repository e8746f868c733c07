"""Budget apart from mechanism: "not solved by step N" is not "does not learn".

A run stops at its step budget. A value whose model did not reach the threshold in N
steps may learn the task at 2N: calling it failing would report the budget, not the
mechanism. So each effect gets a **learning verdict** read across the step budgets its
(task, width) was trained under (``study run --steps N,M,…``), from the steps to the
threshold of the base and of the value:

- a model **solves** the task at a budget when at least half its seed results reached the
  threshold there; its steps are the mean steps to it over those seeds, at the smallest
  budget where it solves;
- the base's steps B: at the smallest budget where the base solves. Where it solves at
  none there is no verdict (``learning`` None): nothing to be slower than;
- a value that solves is ``faster``, ``as fast`` or ``slower`` by its steps against B
  (the early stop makes the steps the effect among solved models);
- a value that solves at no tested budget but whose seeds reached the threshold some of
  the time (fewer than half, at some budget) is **seed-dependent**: it can learn the task,
  and whether it does depends on the seed; neither "slower" nor "does not learn" says that;
- a value no seed of which reached the threshold at any budget **does not learn** only
  where the largest budget tested is at least ``FACTOR`` × B (it had four times what the
  base needed); otherwise it is ``slower``: not solved by the largest budget, which was
  too short to call it failing.

Pure Python, no torch."""

from __future__ import annotations

FACTOR = 4  # a failing value failed at a budget at least 4 times the base's steps
SOLVED = 0.5  # a model solves at a budget when at least half its seeds reached the threshold


def _solves(e: dict) -> bool:
    return e["solved_fraction"] is not None and e["solved_fraction"] >= SOLVED \
        and e["steps_to_threshold_mean"] is not None


def _first_solved(cells: list[dict]) -> dict | None:
    """The effect at the smallest budget where its model solves (None: at none)."""
    return next((e for e in sorted(cells, key=lambda e: e["budget"] or 0) if _solves(e)), None)


def _verdict(base: dict | None, cells: list[dict]) -> tuple[str | None, str]:
    """(verdict, why) of one value's effects across budgets against the base's."""
    largest = max(e["budget"] or 0 for e in cells)
    if not largest:
        return None, "the step budget is not recorded"
    if base is None:
        return None, f"the base reaches the threshold at no tested budget (up to {largest})"
    b = base["steps_to_threshold_mean"]
    mine = _first_solved(cells)
    if mine is not None:
        s = mine["steps_to_threshold_mean"]
        word = "faster" if s < b else "slower" if s > b else "as fast"
        return word, f"solved in {s:g} steps (budget {mine['budget']}); the base in {b:g}"
    some = max(cells, key=lambda e: (e["solved_fraction"] or 0, -(e["budget"] or 0)))
    if some["solved_fraction"]:
        return "seed-dependent", (
            f"{some['solved_fraction']:.0%} of its seeds reached the threshold by step "
            f"{some['budget']} (fewer than half); the base in {b:g} steps")
    if largest >= FACTOR * b:
        return "does not learn", (f"not solved by step {largest}, {largest / b:.3g}× the "
                                  f"base's {b:g} steps (at least {FACTOR}×)")
    return "slower", (f"not solved by step {largest}, under {FACTOR}× the base's {b:g} "
                      f"steps: no budget long enough was tested to call it failing")


def learning(effects: list[dict]) -> None:
    """Adds to every effect (each with ``task``, ``width``, ``budget``, ``dimension``,
    ``value``, ``verdict``, ``solved_fraction``, ``steps_to_threshold_mean``) its
    ``learning`` verdict, the reason (``learning_why``), ``base_steps_to_threshold`` (B),
    ``budgets`` (those its verdict read) and ``learning_factor``."""
    cells: dict[tuple, list[dict]] = {}
    for e in effects:
        cells.setdefault((e["task"], e["width"], e["dimension"], e["value"]), []).append(e)
    bases: dict[tuple, list[dict]] = {}
    for e in effects:
        if e["verdict"] == "base":
            bases.setdefault((e["task"], e["width"]), [])
            if e not in bases[(e["task"], e["width"])]:
                bases[(e["task"], e["width"])].append(e)
    for (task, width, _, _), mine in cells.items():
        base_cells = {e["budget"]: e for e in bases.get((task, width), [])}
        base = _first_solved(list(base_cells.values()))
        is_base = all(e["verdict"] == "base" for e in mine)
        verdict, why = (("base", "the base") if is_base else _verdict(base, mine))
        for e in mine:
            e.update(learning=verdict, learning_why=why, learning_factor=FACTOR,
                     base_steps_to_threshold=None if base is None
                     else base["steps_to_threshold_mean"],
                     budgets=sorted(x["budget"] or 0 for x in mine))
