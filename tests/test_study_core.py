"""The study's core (issue 26): plans, tasks with gold, one run trained and measured.

Budget: about 20 s on one core (four smoke-profile runs of one seed, one plan)."""

import dataclasses

import pytest

from taxcompile.study import models as Mdl
from taxcompile.study import plan as P
from taxcompile.study import tasks as T
from taxcompile.study.runs import PROTOCOL_VERSION, Run, StudyError, execute, plan

from conftest import ROOT


def _copy_run(supervised: bool, seeds=(0,)) -> Run:
    m = Mdl.slice_models("copy", 16)[0]
    assert m.dimension == "base"
    return Run(m.source, Mdl.spec_text(m, supervised), m.name, "copy", seeds, (1e-2,), "smoke",
               supervised)


def _metrics(results) -> list[dict]:
    out = []
    for r in results:
        d = dataclasses.asdict(r)
        d.pop("seconds"), d.pop("seconds_per_step")
        out.append(d)
    return out


@pytest.fixture(scope="module")
def copy_runs():
    pytest.importorskip("torch")
    return {sup: execute(_copy_run(sup)) for sup in (False, True)}


def test_same_run_gives_the_same_metrics(copy_runs):
    again = execute(_copy_run(False))
    assert _metrics(again) == _metrics(copy_runs[False])


def test_supervision_raises_gold_mass_on_copy(copy_runs):
    plain = copy_runs[False][0].attention["gold_mass"]
    supervised = copy_runs[True][0].attention["gold_mass"]
    # uniform attention over copy's 16 keys puts 1/16 on the gold key
    assert supervised > plain + 0.05, (plain, supervised)


def test_a_result_has_the_contract_fields(copy_runs):
    r = copy_runs[False][0]
    assert set(r.attention) >= {"gold_mass", "aer", "comprehensiveness", "sufficiency",
                                "uniform_drop"}
    assert r.row["scoring"] == "Additive" and r.row["query_type"] == "Basic"
    assert len(r.row) == 8
    assert r.params > 0 and r.steps > 0 and 0 <= r.accuracy <= 1
    # the top-k positions matter more than random ones would be the trained model's claim;
    # here only that both were measured
    assert r.attention["comprehensiveness_random"] is not None


def test_a_result_has_its_learning_curve_on_the_test_batch(copy_runs):
    """(step, test accuracy) at each evaluation until the stop; the reported accuracy is the
    curve's last point, the validation accuracy (which stopped it) is kept apart."""
    from taxcompile.study.protocol import PROFILES

    prof = PROFILES["smoke"]
    for r in copy_runs[False] + copy_runs[True]:
        steps = [t for t, _ in r.curve]
        assert steps == list(range(prof.eval_every, r.steps + 1, prof.eval_every)), steps
        assert all(0 <= a <= 1 for _, a in r.curve)
        assert r.curve[-1] == (r.steps, r.accuracy)
        assert r.val_accuracy is not None and 0 <= r.val_accuracy <= 1
        if r.steps_to_threshold is not None:  # stopped by the validation batch
            assert r.val_accuracy >= 0.99 and r.steps == r.steps_to_threshold


def test_the_protocol_names_three_batches_apart():
    """Training, validation (the stop, the learning rate) and test (reported only) come
    from three streams of each seed: the three batches differ, and the record says so."""
    torch = pytest.importorskip("torch")
    from taxcompile.study.cli import protocol_record
    from taxcompile.study.protocol import PROFILES, task_seed

    batches = protocol_record("slice")["settings"]["batches"]
    assert {k: (b["stream"], b["size"]) for k, b in batches.items()} == \
        {"train": (1, 64), "validation": (2, 256), "test": (5, 512)}
    assert len(PROFILES["slice"].seeds) >= 5
    drawn = {k: T.batch("copy", torch.Generator().manual_seed(task_seed("copy", 0, b["stream"])),
                        8)["x"] for k, b in batches.items()}
    assert not torch.equal(drawn["validation"], drawn["test"])
    assert not torch.equal(drawn["train"], drawn["test"])


def test_run_key_separates_what_changes_a_metric():
    a, b = _copy_run(False), _copy_run(True)
    assert a.key(0) != b.key(0) != a.key(1)
    assert PROTOCOL_VERSION in a.key(0)
    assert a.model_hash() != b.model_hash()  # the supervised spec is another model


def test_smoke_covers_every_value_of_the_five_dimensions():
    runs, skips = plan("smoke")
    assert all(r.profile == "smoke" for r in runs)
    swapped = {(r.source.split(":")[2].split("=")[0], r.source.split(":")[2].split("=")[1])
               for r in runs}
    for dim in Mdl.DIMENSIONS:
        base = getattr(Mdl.BASE, Mdl.FIELD[dim])
        for v in Mdl.VALUES[dim]:
            assert v == base or (dim, v) in swapped, (dim, v, [s.why for s in skips])
    # and the checked models classify to every label of those dimensions
    labels = P.coverage(runs)
    from taxcompile.classification import ORDER
    for dim in Mdl.DIMENSIONS:
        want = set(ORDER[dim]) - {"Soft"}  # "Soft" is the table's name for Global beside Hard
        assert labels[dim] == want, dim
    assert any(r.supervised for r in runs)
    # and the feature dimensions on the tasks whose inputs give them something to do
    feature = {(r.source.split(":")[2]) for r in runs}
    assert {"feature_multiplicity=alternating", "feature_multiplicity=interactive",
            "feature_multiplicity=parallel", "feature_levels=hierarchical",
            "feature_representations=multi"} <= feature


def test_tasks_emit_consistent_gold():
    torch = pytest.importorskip("torch")
    for name, info in T.TASKS.items():
        if info.family == "lm":  # one gold row per scored position: test_study_tasks_lit.py
            continue
        b = T.batch(name, torch.Generator().manual_seed(0), 4)
        assert b["x"].shape[:2] == (4, info.L) and b["q"].shape == (4, info.T)
        assert b["gold"].shape == (4, info.T, info.L)
        rows = b["gold"].sum(-1)
        assert torch.allclose(rows, torch.ones_like(rows)), name
        assert bool((b["possible"] | ~(b["gold"] > 0)).all()), name  # S ⊆ P
        again = T.batch(name, torch.Generator().manual_seed(0), 4)
        assert all(torch.equal(b[k], again[k]) for k in b), name
        pos = b["gold"].argmax(-1)
        if name == "segments":  # the keyword sits in the gold segment
            seg = b["x"][torch.arange(4), pos[:, 0]]  # (B, W)
            assert bool((seg == b["y"]).any(1).all())
        elif name == "pair_recall":  # the gold key is in z, and its value follows it
            key = b["x"].gather(1, pos)
            assert bool((b["z"] == key).any(1).all())
            assert torch.equal(b["x"].gather(1, pos + 1), b["y"])
        elif name.startswith("mqar") or name == "noisy_recall":
            # the value follows its key
            assert torch.equal(b["x"].gather(1, pos + 1), b["y"]), name
        else:
            assert torch.equal(b["x"].gather(1, pos), b["y"]), name


def test_unknown_task_is_a_clear_error():
    with pytest.raises(StudyError, match="unknown task `nope`") as e:
        plan("smoke", tasks=["nope"])
    assert "copy" in e.value.hint
    bad = dataclasses.replace(_copy_run(False), task="nope")
    with pytest.raises(StudyError, match="unknown task"):
        execute(bad)
    with pytest.raises(StudyError, match="unknown profile"):
        plan("huge")


def test_a_spec_no_task_fits_names_the_model_and_why():
    with pytest.raises(StudyError) as e:
        plan("smoke", specs=[str(ROOT / "specs" / "luong2015.attn")])
    msg = str(e.value)
    assert "luong2015.attn" in msg and "global_dot" in msg
    assert "the task's `x` (the tokens attended over) reads no input: it has no input `x` " \
        "(name one with --input x=NAME; its token inputs: src, tgt)" in msg


USER = """
paper mine { cite = "Mine" }
let d = 8
model recall {
    input x: tokens[L] (vocab = 64)
    input q: tokens[T] (vocab = 64)
    feature h = embed(x, d)
    attention att { query = embed(q, d)  features = h  score = general }
    output y = classify(att, 64)
}
model tiny_vocab {
    input x: tokens[L] (vocab = 10)
    input q: tokens[T] (vocab = 10)
    attention att { query = embed(q, d)  features = embed(x, d)  score = general }
    output y = classify(att, 10)
}
"""


def test_user_specs_run_on_the_tasks_their_inputs_fit(tmp_path):
    path = tmp_path / "mine.attn"
    path.write_text(USER, encoding="utf-8")
    runs, skips = plan("smoke", specs=[str(path)], tasks=["copy", "keyword", "mqar4"])
    assert sorted(r.task for r in runs) == ["copy", "keyword", "mqar4"]
    assert all(r.model == "recall" and not r.supervised for r in runs)
    (skip,) = skips
    assert skip.model == "tiny_vocab" and "vocabulary of 10" in skip.why


def test_params_fits_the_width_within_ten_percent():
    pytest.importorskip("torch")
    m = Mdl.slice_models("copy", 16)[0]
    fitted = P.fit_width(m, False, 6000)
    n = P.count_params(Mdl.spec_text(fitted), fitted.name)
    assert abs(n - 6000) <= 600, (fitted.d, n)


def test_params_fits_a_users_width_through_its_config(tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "mine.attn"
    path.write_text(USER, encoding="utf-8")
    runs, _ = plan("smoke", specs=[str(path)], params=20000, tasks=["copy"])
    (run,) = runs
    (field, d), = run.config
    assert field == "d" and d != 8
    assert abs(P.count_params(run.spec, run.model, run.config) - 20000) <= 2000
    plain, _ = plan("smoke", specs=[str(path)], tasks=["copy"])
    assert plain[0].model_hash() != run.model_hash()


def test_planning_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys; from taxcompile.study.runs import plan; runs, _ = plan('smoke'); "
            "assert runs; assert not any(m == 'torch' or m.startswith('torch.') "
            "for m in sys.modules), 'torch imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_crf_marginals_have_no_gold_mass_but_an_alignment_error_rate():
    """A CRF alignment's raw marginals are no distribution over the keys (each in (0, 1),
    their sum anything from 0 to L): the weight they put on the gold links is no mass, so
    the measure is left out; their arg-max links still give an AER."""
    pytest.importorskip("torch")
    (m,) = [m for m in Mdl.slice_models("copy", 16) if m.value == "crf"]
    run = Run(m.source, Mdl.spec_text(m, False), m.name, "copy", (0,), (1e-2,), "smoke", False)
    (r,) = execute(run)
    assert r.attention["gold_mass"] is None
    assert r.attention["aer"] is not None and 0 <= r.attention["aer"] <= 1
    assert not any(k.startswith("gold_mass:") for k in r.attention)


POOLED = """
paper mine { cite = "Mine" }
let d = 8
model pooled {
    input x: tokens[L] (vocab = 64)
    attention att { query = learned(d)  features = embed(x, d)  score = additive }
    output y = classify(att, 64)
}
"""


def test_a_task_whose_input_the_model_lacks_is_a_skip_shown_in_plan_and_report(tmp_path,
                                                                               capsys):
    """pair_recall's query is in its second input `z`: a model without one would be
    trained on x alone, blind to what it is asked. So it is a skip, with the reason, in
    the plan (dry run) and in the report, beside the tasks the model does fit."""
    from taxcompile.study import cli, report
    from taxcompile.study.store import Store

    path = tmp_path / "pooled.attn"
    path.write_text(POOLED, encoding="utf-8")
    runs, skips = plan("smoke", specs=[str(path)], tasks=["keyword", "pair_recall"])
    assert [r.task for r in runs] == ["keyword"]
    (skip,) = skips
    assert (skip.model, skip.task) == ("pooled", "pair_recall")
    why = ("task pair_recall puts its query (4 tokens, one of them a key of x) in its `z` "
           "(tokens[M]), which no input reads (name one with --input z=NAME; its token "
           "inputs: x)")
    assert skip.why == why
    db = tmp_path / "s.db"
    assert cli.main(["run", str(path), "--tasks", "keyword", "pair_recall", "--db", str(db),
                     "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert f"skip: {path}: model pooled on pair_recall: {why}\n" in err, err
    assert not db.exists()
    with Store.create_or_open(db, cli.protocol_record("smoke")) as store:
        store.put_skips(skips)
        md = report.to_md(report.document(store))
    assert f"## Skipped\n\n- {path}: model pooled on pair_recall: {why}\n" in md, md
