"""The study's engine: the SQLite store, the local and Ray engines, resume after SIGKILL,
the command line's errors and the report (taxcompile/study/{store,engines,cli,report}.py).

Most tests run ``tests/study_fake.py``'s runs (metrics a pure function of the run, no
training), so that they test the engine and stay cheap; the training itself is tested in
the core's tests."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import study_fake
from conftest import ROOT
from taxcompile.study import cli, engines, report, runs
from taxcompile.study.store import Store

TIMINGS = ("seconds", "seconds_per_step", "engine")
REAL_PLAN = runs.plan  # before the fixture swaps in the fake


def untimed(results) -> str:
    """Seed results without their timings, as JSON (NaN compares equal to itself)."""
    from dataclasses import asdict

    return json.dumps([{k: v for k, v in asdict(r).items() if k not in TIMINGS}
                       for r in results], sort_keys=True)


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """Study commands on study_fake's runs; returns the execution log's path."""
    log = tmp_path / "executions.log"
    monkeypatch.setattr(runs, "plan", study_fake.plan)
    monkeypatch.setattr(engines, "EXECUTE", "study_fake:execute")
    monkeypatch.setenv("STUDY_FAKE_LOG", str(log))
    return log


def study(*args: str) -> int:
    return cli.main(list(args))


def metrics(db: Path) -> list[dict]:
    """Every stored seed result without its timings."""
    with Store.read(db) as store:
        return [{k: v for k, v in r.items() if k not in TIMINGS + ("finished",)}
                for r in store.results()]


# ---- the same command twice; both engines ----------------------------------------------------


def test_same_command_twice_gives_identical_metrics_and_a_rerun_trains_nothing(fake, tmp_path,
                                                                                 capsys):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    assert study("run", "--db", str(a), "--workers", "2") == 0
    assert study("run", "--db", str(b), "--workers", "1") == 0
    got = metrics(a)
    assert len(got) == len(study_fake.VARIANTS) * 3
    assert got == metrics(b)
    # each stored value is what the run returned, bit for bit (REAL is an IEEE double)
    run = study_fake.plan("smoke")[0][3]
    want = {r.seed: r.accuracy for r in study_fake.execute(run)}
    assert {r["seed"]: r["accuracy"] for r in got if r["model"] == "m3"} == want
    executed = fake.read_text().split()
    capsys.readouterr()
    assert study("run", "--db", str(a)) == 0  # everything is stored: nothing runs again
    assert fake.read_text().split() == executed
    assert "0 to train" in capsys.readouterr().err


def test_ray_engine_gives_the_same_metrics_as_the_local_one(fake, tmp_path):
    ray = pytest.importorskip("ray")
    local, remote = tmp_path / "local.db", tmp_path / "ray.db"
    assert study("run", "--db", str(local), "--workers", "2") == 0
    # a local Ray, as CI starts it; its workers import this checkout (and study_fake)
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path, "STUDY_FAKE_LOG": str(fake)}})
    try:
        assert study("run", "--db", str(remote), "--engine", "ray") == 0
        # and one real run (the smoke profile's base model on copy), trained both ways
        real = next(r for r in REAL_PLAN("smoke", tasks=["copy"])[0] if r.source == "slice:copy:base=base")
        (on_ray,) = list(engines.ray([real]))
    finally:
        ray.shutdown()
    assert metrics(remote) == metrics(local)
    with Store.read(remote) as store:
        assert {r["engine"] for r in store.results()} == {"ray"}
    (on_pool,) = list(engines.local([real], 1))
    assert on_ray.error is None and on_pool.error is None, (on_ray.error, on_pool.error)
    assert untimed(on_ray.results) == untimed(on_pool.results)
    assert len(on_pool.results) == len(real.seeds)


# ---- SIGKILL and resume ----------------------------------------------------------------------

KILLABLE = textwrap.dedent("""
    import sys
    sys.path[:0] = [{root!r}, {tests!r}]
    import study_fake
    from taxcompile.study import cli, engines, runs
    runs.plan = study_fake.plan
    engines.EXECUTE = "study_fake:execute"
    if __name__ == "__main__":
        sys.exit(cli.main(sys.argv[1:]))
""")


def _stored(db: Path) -> set[str]:
    if not db.exists():
        return set()
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {k for (k,) in conn.execute("SELECT key FROM results")}
    except sqlite3.OperationalError:  # created, not yet renamed into place
        return set()
    finally:
        conn.close()


def test_a_study_killed_with_sigkill_resumes_with_no_run_twice_and_none_lost(tmp_path):
    script = tmp_path / "study.py"
    script.write_text(KILLABLE.format(root=str(ROOT), tests=str(ROOT / "tests")))
    log, db = tmp_path / "executions.log", tmp_path / "s.db"
    env = dict(os.environ, STUDY_FAKE_LOG=str(log), STUDY_FAKE_DELAY="1.0")
    command = [sys.executable, str(script), "run", "--db", str(db), "--workers", "2"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(_stored(db)) < 2 * 3 and time.monotonic() < deadline:  # two runs stored
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    before = _stored(db)
    assert 6 <= len(before) < len(study_fake.VARIANTS) * 3, "killed too late to test a resume"
    # the orphaned workers stop too (they watch their parent), so nothing keeps running
    time.sleep(1.5)
    settled = log.read_text()
    time.sleep(1.0)
    assert log.read_text() == settled, "a worker kept running after its study was killed"

    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    planned = study_fake.plan("smoke")[0]
    want = {r.key(s) for r in planned for s in r.seeds}
    with Store.read(db) as store:
        rows = store.results()
    assert sorted(r["key"] for r in rows) == sorted(want)  # none lost, none twice
    assert before <= want
    executions = log.read_text().split()
    counts = {r.key(r.seeds[0]): executions.count(r.key(r.seeds[0])) for r in planned}
    stored_runs = {r.key(r.seeds[0]) for r in planned if r.key(r.seeds[0]) in before}
    assert all(counts[k] == 1 for k in stored_runs), counts  # stored: never run again
    assert all(counts[k] >= 1 for k in counts)
    assert sum(counts.values()) - len(planned) <= 2  # at most the 2 runs in flight, again


# ---- errors: clear, exit 2, nothing lost -----------------------------------------------------


def _fails(capsys, *args: str) -> str:
    assert study(*args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("taxcompile: error: "), err
    assert "\n  hint: " in err, err
    return err


def test_a_study_file_of_another_protocol_version_is_refused_and_kept(fake, tmp_path, capsys):
    db = tmp_path / "old.db"
    with Store.create_or_open(db, {"version": "0", "profile": "smoke"}):
        pass
    data = db.read_bytes()
    err = _fails(capsys, "run", "--db", str(db))
    assert f"holds results of study protocol 0; this taxcompile trains under protocol " \
           f"{runs.PROTOCOL_VERSION}" in err
    assert db.read_bytes() == data and not fake.exists()  # nothing trained, nothing written
    err = _fails(capsys, "run", "--db", str(db), "--dry-run")
    assert "protocol 0" in err


def test_a_study_file_of_another_profile_is_refused(fake, tmp_path, capsys):
    db = tmp_path / "s.db"
    assert study("run", "--db", str(db), "--profile", "smoke") == 0
    capsys.readouterr()
    before = metrics(db)
    err = _fails(capsys, "run", "--db", str(db), "--profile", "slice")
    assert "other protocol settings (profile: 'smoke' there, 'slice' now, settings.batch: " \
           "32 there, 64 now" in err
    assert metrics(db) == before


def test_a_corrupt_or_foreign_file_is_refused_and_kept(fake, tmp_path, capsys):
    good = tmp_path / "good.db"
    assert study("run", "--db", str(good)) == 0
    capsys.readouterr()
    garbage, half, other = tmp_path / "garbage.db", tmp_path / "half.db", tmp_path / "other.db"
    garbage.write_bytes(b"not a database at all\n" * 100)
    data = good.read_bytes()
    half.write_bytes(data[:len(data) // 2])
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    for db, why in ((garbage, "is not a study file (not a SQLite database)"),
                    (half, "is damaged"),
                    (other, "is not a taxcompile study file")):
        before = db.read_bytes()
        for args in (("run", "--db", str(db)), ("report", str(db))):
            err = _fails(capsys, *args)
            assert why in err, err
        assert db.read_bytes() == before


def _without_root_override() -> None:
    """In the child before exec: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the
    bounding set, so that even root gets "permission denied" on a file of mode 0444."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_a_read_only_study_file_is_refused_for_runs_and_read_for_reports(tmp_path):
    script = tmp_path / "study.py"
    script.write_text(KILLABLE.format(root=str(ROOT), tests=str(ROOT / "tests")))
    (tmp_path / "ro").mkdir()
    db = tmp_path / "ro" / "s.db"
    base = [sys.executable, str(script)]
    assert subprocess.run(base + ["run", "--db", str(db)], capture_output=True,
                          timeout=120).returncode == 0
    db.chmod(0o444)
    data = db.read_bytes()
    kw = dict(capture_output=True, text=True, timeout=120,
              preexec_fn=_without_root_override if os.geteuid() == 0 else None)
    try:
        p = subprocess.run(base + ["run", "--db", str(db)], **kw)
    except subprocess.SubprocessError as e:
        pytest.skip(f"root cannot give up its override of file modes here: {e}")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith(f"taxcompile: error: cannot write the study file {db}: "
                               "the file is read-only\n  hint: "), p.stderr
    for directory in (0o755, 0o555):  # a read-only directory too: nowhere for a -shm file
        db.parent.chmod(directory)
        p = subprocess.run(base + ["report", str(db), "--format", "json"], **kw)
        assert p.returncode == 0, p.stderr
        assert len(json.loads(p.stdout)["runs"]) == len(study_fake.VARIANTS) * 3
    db.parent.chmod(0o755)
    assert db.read_bytes() == data


def test_an_unknown_task_is_named_with_the_known_ones(tmp_path, capsys):
    db = tmp_path / "s.db"
    err = _fails(capsys, "run", "--db", str(db), "--tasks", "copy", "nope")
    assert err.startswith("taxcompile: error: unknown task `nope`\n  hint: the tasks are "
                          "mqar4, mqar8, copy,"), err
    assert not db.exists()


def test_a_real_spec_no_task_fits_is_named_with_why(tmp_path, capsys):
    db = tmp_path / "s.db"
    err = _fails(capsys, "run", str(ROOT / "specs" / "bahdanau2015.attn"), "--db", str(db))
    assert "bahdanau2015.attn model `rnnsearch`: no task fits: copy: the task's `x` (the " \
           "tokens attended over) reads no input: it has no input `x` (name one with " \
           "--input x=NAME; its token inputs: src, tgt);" in err, err
    assert not db.exists()


def test_a_spec_no_task_fits_is_named_with_why(monkeypatch, tmp_path, capsys):
    spec = tmp_path / "mine.attn"
    spec.write_text("paper p { }\n")
    monkeypatch.setattr(runs, "plan", lambda *a, **k: (
        [], [runs.Skip(str(spec), "m", None, "no token input to build a task from")]))
    db = tmp_path / "s.db"
    err = _fails(capsys, "run", str(spec), "--db", str(db))
    assert f"no task fits {spec}:\n  {spec}: model m: no token input to build a task " \
           "from\n" in err
    assert not db.exists()


# ---- the report ------------------------------------------------------------------------------


def test_report_json_has_the_issue_fields_and_effects_against_the_base(fake, tmp_path, capsys):
    db = tmp_path / "s.db"
    assert study("run", "--db", str(db)) == 0
    capsys.readouterr()
    assert study("report", str(db), "--format", "json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["protocol"]["version"] == runs.PROTOCOL_VERSION
    assert len(doc["runs"]) == len(study_fake.VARIANTS) * 3
    for r in doc["runs"]:
        assert {"spec", "model", "row", "task", "seed", "params", "steps", "seconds",
                "accuracy", "steps_to_threshold", "attention", "curve"} <= set(r)
        assert r["curve"] == [[50, r["accuracy"] / 2], [100, r["accuracy"]]]
        assert set(r["row"]) == set(study_fake.BASE)
        assert {"gold_mass", "aer", "comprehensiveness", "sufficiency",
                "uniform_drop"} <= set(r["attention"])
        assert r["attention"]["sufficiency"] is None
    assert doc["base"] == {"copy": study_fake.BASE}
    planned = {r.model: r for r in study_fake.plan("smoke")[0]}

    def accs(model):
        return [s.accuracy for s in study_fake.execute(planned[model])]

    effects = {(e["dimension"], e["value"]): e for e in doc["effects"]}
    for e in doc["effects"]:
        assert {"dimension", "value", "task", "n", "accuracy_mean", "ci95", "diff_mean",
                "diff_ci95", "p", "p_adjusted", "p_adjusted_method", "solved_fraction",
                "steps_to_threshold_mean", "budget", "width", "learning", "learning_why",
                "base_steps_to_threshold"} <= set(e)
    base_mean = sum(accs("m0")) / 3
    e = effects[("scoring", "Multiplicative")]  # m1 alone differs only in scoring
    assert (e["n"], e["comparison"]) == (3, "others at base")
    assert e["accuracy_mean"] == pytest.approx(sum(accs("m1")) / 3)
    assert e["diff_mean"] == pytest.approx(e["accuracy_mean"] - base_mean)
    assert e["p_adjusted_method"] == doc["statistics"]["method"] == "holm"
    assert e["verdict"] == ("no difference shown" if e["p_adjusted"] >= 0.05
                            else "above the base" if e["diff_mean"] > 0 else "below the base")
    solved = [a for a in accs("m1") if a >= 0.8]  # study_fake: solved at step 50
    assert e["solved_fraction"] == pytest.approx(len(solved) / 3)
    assert e["steps_to_threshold_mean"] == (50 if solved else None)
    assert effects[("scoring", "Additive")]["verdict"] == "base"
    # the two-factor model m7 gives the one interaction: acc(ab) - acc(a) - acc(b) + base
    (inter,) = doc["interactions"]
    assert inter["values"] == ["Multiplicative", "Sparse"]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert inter["interaction"] == pytest.approx(
        mean(accs("m7")) - mean(accs("m1")) - mean(accs("m3")) + base_mean)
    # md and csv carry the same effects; -o writes the files and a plot per task
    out = tmp_path / "rep"
    assert study("report", str(db), "-o", str(out), "--format", "csv") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("task,budget,width,dimension,value")
    assert len(lines) == len(doc["effects"]) + 1
    assert (out / "report.md").read_text().count("| scoring | Multiplicative |") == 1
    assert json.loads((out / "report.json").read_text()) == doc
    pytest.importorskip("matplotlib")
    assert (out / "effects_copy.png").read_bytes()[:4] == b"\x89PNG"


def test_the_front_end_and_study_report_import_neither_torch_nor_ray(fake, tmp_path):
    db = tmp_path / "s.db"
    assert study("run", "--db", str(db)) == 0
    code = textwrap.dedent(f"""
        import contextlib, io, sys
        sys.path.insert(0, {str(ROOT)!r})
        from taxcompile.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main(["--help"])
            except SystemExit:
                pass
            assert main(["study", "report", {str(db)!r}, "--format", "json"]) == 0
            assert main(["study", "run", "--dry-run", "--db", {str(db) + "-new"!r}]) == 0
        print(sorted(m for m in ("torch", "ray") if m in sys.modules))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "[]", p.stderr


def test_the_html_report_has_a_study_page_with_the_effects(fake, tmp_path, capsys):
    from taxcompile import report as site

    db = tmp_path / "s.db"
    assert study("run", "--db", str(db)) == 0
    with Store.read(db) as store:
        doc = report.document(store)
    files = site._study_page(site._env(), doc)
    page = files["study.html"]
    e = next(e for e in doc["effects"] if e["value"] == "Multi-Dimensional")
    row = (f"<tr><td>dimensionality</td><td>Multi-Dimensional</td><td>others at base</td>"
           f"<td>3</td>\n<td>{e['accuracy_mean']:.3f}</td><td>[{e['ci95'][0]:.3f}, "
           f"{e['ci95'][1]:.3f}]</td>")
    assert row in page
    assert page.count("<tr><td>") == len(doc["effects"])
    index = site._env().get_template("index.html.j2").render(
        dims=(), titles={}, version="", study=True, table3=[], others=[])
    assert '<a href="study.html">' in index
