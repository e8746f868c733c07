"""Budget apart from mechanism (taxcompile/study/budget.py, plan.py, store.py): `study run
--steps N,M --width a,b` multiplies the runs, each records its budget and width, the
report groups its effects by them, and a value that did not reach the threshold is
"slower" unless the largest budget tested was at least 4× the base's steps to it — only
then "does not learn"."""

from __future__ import annotations

import json
import sqlite3

import pytest

import study_fake
from test_study_engine import fake, study  # noqa: F401
from taxcompile.study import budget, report, runs
from taxcompile.study.store import Store

BASE = study_fake.BASE


class Stored:
    """A study file's content: per model, {budget: (accuracies, steps to threshold)}."""

    protocol = {"version": "2", "profile": "test", "settings": {"steps": 60, "d": 16}}

    def __init__(self, models: dict[str, tuple[dict, dict[int, tuple[list, list]]]]):
        self.rows = []
        for name, (swap, by_budget) in models.items():
            for b, (accs, steps) in by_budget.items():
                for seed, (acc, st) in enumerate(zip(accs, steps)):
                    self.rows.append(dict(
                        source=f"slice:copy:{name}", model=name, model_hash=f"{name}@{b}",
                        row=BASE | swap, task="copy", supervised=False, seed=seed, lr=0.01,
                        params=1, steps=st or b, seconds=1.0, seconds_per_step=0.1,
                        accuracy=acc, final_loss=0.1, val_accuracy=acc, steps_to_threshold=st,
                        attention={}, engine="local", curve=[[b, acc]], budget=b, width=16))

    def results(self):
        return self.rows

    def skips(self):
        return []


UNSOLVED = ([0.3, 0.4, 0.35], [None, None, None])
SOLVED_AT = {20: ([1.0] * 3, [20, 20, 20]), 40: ([1.0] * 3, [40, 40, 40]),
             120: ([1.0] * 3, [100, 120, 140])}


def _learning(budgets: list[int]) -> dict[str, dict]:
    """The base reaches the threshold in 40 steps (three seeds) at every budget; General
    in 20; Multiplicative only with a budget of 200 or more, in 120; Sparse never."""
    models = {
        "base=base": ({}, {b: SOLVED_AT[40] for b in budgets}),
        "score=general": ({"scoring": "General"}, {b: SOLVED_AT[20] for b in budgets}),
        "score=dot": ({"scoring": "Multiplicative"},
                      {b: SOLVED_AT[120] if b >= 200 else UNSOLVED for b in budgets}),
        "align=sparse": ({"alignment": "Sparse"}, {b: UNSOLVED for b in budgets}),
    }
    doc = report.document(Stored(models))
    return {(e["value"], e["budget"]): e for e in doc["effects"]}


def test_faster_slower_and_does_not_learn_follow_the_base_steps_times_four():
    # budgets 60 and 150: the largest is under 4 × 40 = 160, so a value never solved is
    # only "slower" (not solved by step 150)
    short = _learning([60, 150])
    assert short[("General", 60)]["learning"] == "faster"
    assert short[("Multiplicative", 150)]["learning"] == "slower"
    sparse = short[("Sparse", 150)]
    assert sparse["learning"] == "slower" and sparse is not short[("Sparse", 60)]
    assert "not solved by step 150" in sparse["learning_why"]
    assert sparse["base_steps_to_threshold"] == 40 and sparse["learning_factor"] == 4
    assert sparse["budgets"] == [60, 150]
    assert short[("Additive", 60)]["learning"] == "base"
    # budgets 60 and 240: 240 >= 160, so a value solved at no budget does not learn; one
    # that solved at 240 (in 120 steps, the base's 40) is slower, not failing
    long = _learning([60, 240])
    assert long[("Sparse", 60)]["learning"] == "does not learn"
    assert "6× the base's 40 steps" in long[("Sparse", 240)]["learning_why"]
    assert long[("Multiplicative", 60)]["learning"] == "slower"
    assert long[("General", 240)]["learning"] == "faster"
    # the effects are grouped by budget: each budget has its own base, and pairs by seed
    assert long[("General", 60)]["n_pairs"] == 3 and long[("General", 240)]["n_pairs"] == 3
    assert long[("Multiplicative", 240)]["solved_fraction"] == 1.0
    assert long[("Multiplicative", 60)]["solved_fraction"] == 0.0


def test_a_value_some_seeds_solve_is_seed_dependent_not_failing():
    """Two of five seeds reach the threshold: under half, so the value does not solve, but
    it learns the task sometimes; "does not learn" would be false at any budget."""
    base = {"task": "t", "width": 16, "budget": 600, "dimension": "scoring", "value": "base",
            "verdict": "base", "solved_fraction": 1.0, "steps_to_threshold_mean": 90}
    some = dict(base, value="Multiplicative", verdict="no difference shown",
                solved_fraction=0.4, steps_to_threshold_mean=175)
    none = dict(some, value="Location", solved_fraction=0.0, steps_to_threshold_mean=None)
    budget.learning([base, some, none])
    assert some["learning"] == "seed-dependent"
    assert "40% of its seeds reached the threshold by step 600" in some["learning_why"]
    assert none["learning"] == "does not learn"


def test_no_verdict_where_the_base_never_reaches_the_threshold():
    e = {"task": "t", "width": 16, "budget": 600, "dimension": "scoring", "value": "v",
         "verdict": "no difference shown", "solved_fraction": 0.0,
         "steps_to_threshold_mean": None}
    b = dict(e, value="base", verdict="base")
    budget.learning([b, e])
    assert e["learning"] is None and "no tested budget" in e["learning_why"]


def test_the_markdown_has_a_table_per_budget_and_says_why_slower():
    doc = report.document(Stored({
        "base=base": ({}, {60: SOLVED_AT[40], 150: SOLVED_AT[40]}),
        "align=sparse": ({"alignment": "Sparse"}, {60: UNSOLVED, 150: UNSOLVED})}))
    md = report.to_md(doc)
    assert "### 60 steps, width 16" in md and "### 150 steps, width 16" in md
    assert "| slower (not solved by step 150, under 4× the base's 40 steps" in md
    header = report.to_csv(doc).splitlines()[0].split(",")
    assert header[:3] == ["task", "budget", "width"] and "learning" in header


def test_plan_multiplies_budgets_and_widths_and_keys_them_apart():
    plain, _ = runs.plan("smoke", tasks=["keyword"])
    swept, _ = runs.plan("smoke", tasks=["keyword"], steps=[30, 60, 240], widths=[16, 32])
    assert len(swept) == 6 * len(plain)
    # the profile's own budget (60) is the run of a plain plan: the same key, resumable
    assert {r.key(0) for r in plain} <= {r.key(0) for r in swept}
    assert len({r.key(0) for r in swept}) == len(swept)
    assert {(r.budget, r.width) for r in swept} == {(b, w) for b in (30, None, 240)
                                                   for w in (16, 32)}
    wide = next(r for r in swept if r.width == 32)
    assert "let d = 32" in wide.spec


@pytest.mark.parametrize("args, message", [
    (["--steps", "0"], "argument --steps: must be at least 1, got 0"),
    (["--width", "16,x"], "argument --width: not a whole number: 'x'"),
])
def test_a_bad_sweep_is_one_line_and_exit_2(capsys, tmp_path, args, message):
    with pytest.raises(SystemExit) as info:
        study("run", "--dry-run", "--db", str(tmp_path / "s.db"), *args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and not (tmp_path / "s.db").exists()


def test_width_and_params_together_are_refused(capsys, tmp_path):
    assert study("run", "--dry-run", "--width", "16", "--params", "3000") == 2
    assert "--width and --params both set the width" in capsys.readouterr().err


def test_each_result_records_its_budget_and_width(fake, tmp_path, capsys):  # noqa: F811
    db = tmp_path / "s.db"
    assert study("run", "--db", str(db), "--workers", "1", "--steps", "40,400",
                 "--width", "8") == 0
    with Store.read(db) as store:
        got = {(r["model"], r["budget"], r["width"]) for r in store.results()}
    assert got == {(f"m{i}", b, 8) for i in range(len(study_fake.VARIANTS)) for b in (40, 400)}
    capsys.readouterr()
    assert study("report", str(db), "--format", "json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert {(e["budget"], e["width"]) for e in doc["effects"]} == {(40, 8), (400, 8)}
    assert all("learning" in e and "learning_why" in e for e in doc["effects"])


def test_a_layout_2_file_is_reported_with_the_profiles_budget_and_never_written(
        fake, tmp_path, capsys):  # noqa: F811
    """A file of layout 2 (protocol 2: no budget or width columns) is still reported, its
    rows read as the profile's steps and width; `study run` refuses to add to it."""
    from taxcompile.study.cli import protocol_record

    db = tmp_path / "old.db"
    assert study("run", "--db", str(db), "--workers", "1") == 0
    record = protocol_record("smoke")
    record["version"] = record["settings"]["version"] = "2"
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'protocol'",
                     (json.dumps(record, sort_keys=True),))
        conn.execute("UPDATE results SET protocol_version = '2'")
    conn.execute("ALTER TABLE results DROP COLUMN budget")
    conn.execute("ALTER TABLE results DROP COLUMN width")
    conn.execute("PRAGMA user_version = 2")
    conn.close()
    data = db.read_bytes()
    capsys.readouterr()
    assert study("report", str(db), "--format", "json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert {(r["budget"], r["width"]) for r in doc["runs"]} == {(60, 16)}  # smoke's
    assert study("run", "--db", str(db)) == 2
    err = capsys.readouterr().err
    assert f"{db} is a study file of layout 2 (protocol 2: erasure of the top 3 " in err
    assert "this taxcompile writes layout 3 only" in err and db.read_bytes() == data


def test_a_run_trains_to_its_budget_with_the_schedule_over_it():
    pytest.importorskip("torch")
    from dataclasses import replace

    run = next(r for r in runs.plan("smoke", tasks=["copy"])[0] if r.source.endswith("base=base"))
    got, = runs.execute(replace(run, seeds=(0,), budget=7, width=16))
    assert (got.budget, got.width, got.steps) == (7, 16, 7)  # copy is not solved in 7 steps
    assert [t for t, _ in got.curve] == [7]  # the evaluation at the budget's last step


def test_weight_decay_leaves_a_learned_temperature_alone():
    """AdamW's decay shrinks every weight matrix by (1 - lr · wd) per step, but not the
    cosine score's s (β = exp(s)): decay would pull β towards 1 (protocol 3)."""
    torch = pytest.importorskip("torch")
    from taxcompile.study import runner

    run = next(r for r in runs.plan("smoke", tasks=["copy"])[0]
               if r.source.endswith("scoring=similarity"))
    assert "similarity(scale = learned)" in run.spec
    prof = runner.profile("smoke")
    ens = runner.Ensemble(runner.build(run), run, prof)
    (name,) = [k for k in ens.params if k.endswith("log_beta")]
    matrix = next(k for k, v in ens.params.items() if v.dim() == 3)
    before = {k: v.detach().clone() for k, v in ens.params.items()}
    t = 20  # past the warm-up: lr · schedule(t)
    ens._adamw([None] * len(ens.params), t)
    shrink = 1 - prof.lrs[0] * ens.schedule(t) * prof.weight_decay
    assert torch.equal(ens.params[name], before[name])
    torch.testing.assert_close(ens.params[matrix], before[matrix] * shrink)
