"""Any user's spec in the study (taxcompile/study/fit.py): `study run --input x=doc,q=…`
maps a spec's inputs onto the tensors a task gives, a vocabulary or class count written as
a `let` follows the task through Config, what cannot be mapped is refused with its
reason, and every report has a row per model, named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taxcompile import pipeline
from taxcompile.study import cli, fit, report
from taxcompile.study.runs import StudyError, plan
from taxcompile.study.store import Store

ROOT = Path(__file__).resolve().parents[1]
MEMN2N = ROOT / "examples" / "memory_network.attn"


def _checked(path: Path):
    file, text = pipeline.parse_file(path)
    cs = pipeline.load_text(text, file)
    return cs, {cm.model.name: cm for cm in cs.models}


def test_a_published_spec_with_other_input_names_runs_with_input(tmp_path, capsys):
    """MemN2N reads `story` and `question`: mapped onto pair_recall's x and z it trains
    (a few steps), its results name it, and its seeds learn something of the task's."""
    pytest.importorskip("torch")
    db = tmp_path / "s.db"
    assert cli.main(["run", str(MEMN2N), "--input", "x=story,z=question", "--tasks",
                     "pair_recall", "--steps", "4", "--workers", "1", "--db", str(db)]) == 0
    capsys.readouterr()
    with Store.read(db) as store:
        doc = report.document(store)
    assert {(r["model"], r["task"], r["spec"]) for r in doc["runs"]} == \
        {("memn2n", "pair_recall", str(MEMN2N))}
    assert all(r["curve"] and r["curve"][-1][0] == 4 for r in doc["runs"])
    (row,) = doc["per_model"]
    assert (row["model"], row["task"], row["n"]) == ("memn2n", "pair_recall", 2)
    assert "| memn2n | " + str(MEMN2N) in report.to_md(doc)


def test_a_mapping_is_part_of_the_run_key(tmp_path):
    """The same spec read through another mapping is another model as trained."""
    runs, _ = plan("smoke", specs=[str(MEMN2N)], tasks=["pair_recall"],
                   inputs=(("x", "story"), ("z", "question")))
    swapped, _ = plan("smoke", specs=[str(MEMN2N)], tasks=["pair_recall"],
                      inputs=(("x", "question"), ("z", "story")))
    assert runs[0].inputs == (("x", "story"), ("z", "question"))
    assert runs[0].model_hash() != swapped[0].model_hash()


def test_vocabulary_and_classes_follow_the_task_through_config():
    """LCR-Rot's `let vocab = 20000` and `let classes = 3` are set to the task's 64 by
    Config; Luong's fixed source length `let L = 50` to each task's length."""
    cs, models = _checked(ROOT / "specs" / "wallaart2019.attn")
    got = fit.fit(cs, models["lcr_rot_hop"], "pair_recall",
                  (("x", "left"), ("q", "target"), ("z", "right")))
    assert got.config == (("classes", 64), ("vocab", 64))
    cs, models = _checked(ROOT / "specs" / "luong2015.attn")
    for task, length in (("copy", 16), ("mqar4", 32)):
        got = fit.fit(cs, models["global_location"], task, (("x", "src"), ("q", "tgt")))
        assert got.config == (("L", length), ("vocab", 64)), task


def test_a_class_count_written_as_a_number_is_refused_with_its_reason():
    cs, models = _checked(ROOT / "examples" / "interactive_coattention.attn")
    why = fit.fit(cs, models["ian"], "pair_recall", (("x", "context"), ("z", "target")))
    assert why == ("output `polarity` has 3 classes, written as a number (name it with a "
                   "`let` so the study can set it); the task predicts 64 tokens")


@pytest.mark.parametrize("argv, message", [
    (["examples/gat.attn", "--input", "x=x", "--tasks", "keyword"],
     "taxcompile: error: no task fits the given specs (examples/gat.attn model `gat`: no "
     "task fits: keyword: input `x` (the task's `x`) is set[N]; the task gives tokens over "
     "one axis)"),
    ([str(MEMN2N), "--input", "x=story,q=nope", "--tasks", "keyword"],
     "taxcompile: error: no task fits the given specs (" + str(MEMN2N) + " model `memn2n`: "
     "no task fits: keyword: --input q=nope: it has no input `nope` (its inputs: story, "
     "question))"),
    ([str(MEMN2N), "--input", "w=story"],
     "taxcompile study run: error: argument --input: `w` is not a tensor the tasks give "
     "(they give x, q, z)"),
    ([str(MEMN2N), "--input", "x=story,x=question"],
     "taxcompile study run: error: argument --input: `x` is mapped twice"),
    (["--input", "x=story"],
     "taxcompile: error: --input applies to your own specs; the study's models take none"),
    ([str(MEMN2N), "--input", "x=story,z=question", "--set", "hidden=8", "--tasks",
      "pair_recall"],
     "taxcompile: error: no task fits the given specs (" + str(MEMN2N) + " model `memn2n`: "
     "no task fits: pair_recall: --set hidden=8: it has no `let hidden` set to a number "
     "(its lets: d))"),
    ([str(MEMN2N), "--set", "d=0"],
     "taxcompile study run: error: argument --set: `d=0` is not NAME=N (N a positive whole "
     "number)"),
])
def test_an_input_that_cannot_be_mapped_is_refused_with_its_reason(tmp_path, capsys, argv,
                                                                 message, monkeypatch):
    monkeypatch.chdir(ROOT)
    db = tmp_path / "s.db"
    try:
        code = cli.main(["run", *argv, "--db", str(db)])
    except SystemExit as e:  # argparse's own usage errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    assert message in err.splitlines(), err
    assert not db.exists()


TWINS = """
paper twins { cite = "Twins" }
let d = 8
let V = 64
model first {
    input x: tokens[L] (vocab = V)
    attention att { query = learned(d)  features = embed(x, d)  score = additive }
    output y = classify(att, V)
}
model second {
    input x: tokens[L] (vocab = V)
    attention att { query = learned(d)  features = embed(x, 2 * d)  score = additive }
    output y = classify(att, V)
}
"""


def test_two_models_that_share_a_table_iii_row_are_two_report_rows(tmp_path, capsys):
    pytest.importorskip("torch")
    path = tmp_path / "twins.attn"
    path.write_text(TWINS, encoding="utf-8")
    db, out = tmp_path / "s.db", tmp_path / "out"
    assert cli.main(["run", str(path), "--tasks", "keyword", "--steps", "2", "--workers", "1",
                     "--db", str(db)]) == 0
    assert cli.main(["report", str(db), "-o", str(out), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["model"]: r for r in doc["per_model"]}
    assert sorted(rows) == ["first", "second"]
    assert rows["first"]["row"] == rows["second"]["row"]  # one Table III row
    accs = {m: [r["accuracy"] for r in doc["runs"] if r["model"] == m] for m in rows}
    for m, row in rows.items():  # each row is its own model's seeds
        assert row["n"] == 2 and row["accuracy_mean"] == pytest.approx(sum(accs[m]) / 2)
    (effect_base,) = [e for e in doc["effects"] if e["dimension"] == "scoring"]
    assert effect_base["models"] == 2  # the effects pool them; the rows do not
    md = (out / "report.md").read_text(encoding="utf-8")
    assert f"| first | {path} | plain |" in md and f"| second | {path} | plain |" in md
    csv_rows = (out / "models.csv").read_text(encoding="utf-8").splitlines()
    assert [line.split(",")[3] for line in csv_rows[1:]] == ["first", "second"]


def test_help_says_what_a_spec_needs_for_each_task(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = capsys.readouterr().out
    assert "--input TASK=SPEC" in out
    assert "  pair_recall   x: tokens[16], q: tokens[1] optional, z: tokens[M]; output: one " \
        "per example" in out
    assert "  mqar4         x: tokens[32], q: tokens[4]; output: one per query position of " \
        "q (4)" in out


def test_a_study_model_needs_no_mapping_and_keeps_its_key():
    """Without --input the runs and keys are what they were (identity maps to nothing)."""
    runs, _ = plan("smoke", tasks=["copy"])
    assert all(r.inputs == () for r in runs)
    with pytest.raises(StudyError, match="mapped twice"):
        fit.parse_inputs("x=a,x=b")


def test_set_gives_a_published_model_a_cpu_size_and_is_part_of_the_key():
    """`--set hidden=8,hops=1` on LCR-Rot: its Config fields beside the task's vocabulary
    and classes; a field the task sets cannot be set otherwise."""
    mapping = (("x", "left"), ("q", "target"), ("z", "right"))
    spec = [str(ROOT / "specs" / "wallaart2019.attn")]
    (run,), _ = plan("smoke", specs=spec, tasks=["pair_recall"], inputs=mapping,
                     sets=(("hidden", 8), ("hops", 1)))
    assert run.config == (("classes", 64), ("hidden", 8), ("hops", 1), ("vocab", 64))
    (plain,), _ = plan("smoke", specs=spec, tasks=["pair_recall"], inputs=mapping)
    assert plain.model_hash() != run.model_hash()
    with pytest.raises(StudyError, match="task pair_recall sets `vocab` to 64"):
        plan("smoke", specs=spec, tasks=["pair_recall"], inputs=mapping, sets=(("vocab", 9),))
