"""The study file when something happened to it: deleted after a kill (its stale WAL must
not come back), damaged in content SQLite still opens (a located error, exit 2, the file
kept byte for byte), and a report written where it cannot be (taxcompile/study/store.py,
schema.py, cli.py).

The study files are real ones, written by ``tests/study_fake.py``'s runs."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import study_fake
from conftest import ROOT
from test_study_engine import KILLABLE, _stored, _without_root_override, fake, study  # noqa: F401
from taxcompile.study.store import Store

N_RESULTS = len(study_fake.VARIANTS) * 3


def _fails(capsys, *args: str) -> str:
    assert study(*args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("taxcompile: error: "), err
    assert "\n  hint: " in err, err
    return err


# ---- a study file deleted after a kill ------------------------------------------------------


def test_a_study_file_deleted_after_a_kill_starts_from_zero_and_says_so(tmp_path):
    """SIGKILL leaves s.db-wal and s.db-shm beside s.db; with s.db deleted, SQLite would
    replay that WAL into a new s.db, and the runs of the deleted file would come back."""
    script = tmp_path / "study.py"
    script.write_text(KILLABLE.format(root=str(ROOT), tests=str(ROOT / "tests")))
    log, db = tmp_path / "executions.log", tmp_path / "s.db"
    env = dict(os.environ, STUDY_FAKE_LOG=str(log), STUDY_FAKE_DELAY="0.5")
    command = [sys.executable, str(script), "run", "--db", str(db), "--workers", "2"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(_stored(db)) < 2 * 3 and time.monotonic() < deadline:  # two runs stored
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert 6 <= len(_stored(db)) < N_RESULTS, "killed too late to test a restart"
    wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
    assert wal.exists() and wal.stat().st_size > 0, "no WAL left by the kill: nothing to test"
    time.sleep(1.0)  # the orphaned workers notice their parent is gone
    db.unlink()
    log.write_text("")

    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"taxcompile: note: removed {wal} and {shm}, left by a deleted study file " \
           f"{db}" in done.stderr, done.stderr
    assert f"{len(study_fake.VARIANTS)} runs: 0 already in {db}, " \
           f"{len(study_fake.VARIANTS)} to train" in done.stderr, done.stderr
    assert len(log.read_text().split()) == len(study_fake.VARIANTS)  # every run trained
    assert len(_stored(db)) == N_RESULTS


def test_a_deleted_study_file_still_open_elsewhere_is_refused(tmp_path, capsys):
    """A WAL that a live process still uses (its study file deleted under it) is not
    removed: the new file is refused and that process keeps its files."""
    db = tmp_path / "s.db"
    code = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1]); "
            "c.execute('PRAGMA journal_mode=WAL'); c.execute('CREATE TABLE t (x)'); "
            "c.execute('INSERT INTO t VALUES (1)'); c.commit(); "
            "c.execute('SELECT * FROM t').fetchall(); print('ready', flush=True); "
            "time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        db.unlink()
        wal = Path(f"{db}-wal").read_bytes()
        err = _fails(capsys, "run", "--db", str(db))
        assert f"{db}-shm is in use by another process" in err, err
        assert not db.exists() and Path(f"{db}-wal").read_bytes() == wal
    finally:
        holder.kill()
        holder.wait()


# ---- a study file whose content is damaged ---------------------------------------------------

DAMAGES = {
    "bad protocol JSON": ("UPDATE meta SET value = '{\"version\": ' WHERE key = 'protocol'",
                          "(meta `protocol`: Invalid JSON: EOF while parsing a value"),
    "bad result JSON": ("UPDATE results SET attention = '{\"gold_mass\": 0.5,' WHERE rowid = 3",
                        "(result row 3: `attention`: Invalid JSON: EOF while parsing"),
    "a non-numeric accuracy": ("UPDATE results SET accuracy = 'high' WHERE rowid = 5",
                               "(result row 5: `accuracy`: Input should be a valid number"),
    "a result without a dimension": ("UPDATE results SET row = '{\"scoring\": \"Additive\"}' "
                                     "WHERE rowid = 2", "(result row 2: `row`: Value error, no "
                                     "label of the dimension `feature_multiplicity`)"),
    "a dropped table": ("DROP TABLE skips", "(no table `skips`)"),
    "a missing column": ("ALTER TABLE results DROP COLUMN final_loss",
                         "(table `results` has no column `final_loss`)"),
    "a learning curve that is no list of (step, accuracy)": (
        "UPDATE results SET curve = '[[50, \"high\"]]' WHERE rowid = 4",
        "(result row 4: `curve.0.1`: Input should be a valid number"),
    "a protocol that does not name its batches": (
        "UPDATE meta SET value = json_remove(value, '$.settings.batches') WHERE key = 'protocol'",
        "(meta `protocol`: Value error, protocol 3 names no validation and test batches"),
    "a test batch drawn from the validation stream": (
        "UPDATE meta SET value = json_set(value, '$.settings.batches.test.stream', 2) "
        "WHERE key = 'protocol'", "(meta `protocol`: `settings.batches`: Value error, the "
        "training, validation and test batches share a stream"),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_content_is_a_located_error_and_the_file_is_kept(fake, tmp_path, capsys, damage):
    db = tmp_path / "s.db"
    assert study("run", "--db", str(db)) == 0
    capsys.readouterr()
    sql, want = DAMAGES[damage]
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(sql)
    conn.close()
    assert not Path(f"{db}-wal").exists()
    data = db.read_bytes()
    executed = fake.read_text()
    for args in (("run", "--db", str(db)), ("report", str(db)),
                 ("report", str(db), "--format", "json"), ("run", "--db", str(db), "--dry-run")):
        err = _fails(capsys, *args)
        assert err.startswith(f"taxcompile: error: {db} is damaged {want}"), (args, err)
        assert "; it is kept as it is\n" in err, err
        assert db.read_bytes() == data, args
        assert fake.read_text() == executed  # nothing trained
    wal = Path(f"{db}-wal")  # a read-only connection leaves an empty one: nothing written
    assert not wal.exists() or wal.stat().st_size == 0


# ---- the report written where it cannot be ---------------------------------------------------


def test_report_into_a_file_as_directory_is_a_located_error(fake, tmp_path, capsys):
    db = tmp_path / "s.db"
    assert study("run", "--db", str(db)) == 0
    capsys.readouterr()
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    err = _fails(capsys, "report", str(db), "-o", str(a_file))
    assert f"cannot write the report into {a_file}: it is a file, not a directory" in err, err
    err = _fails(capsys, "report", str(db), "-o", str(a_file / "rep"))
    assert f"cannot write the report into {a_file / 'rep'}: " in err, err
    assert f"{a_file} is in the way (it is not a directory) (nothing written)" in err, err
    assert a_file.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("s.db-")) == \
        ["executions.log", "notes.txt", "s.db"]


def test_report_into_a_read_only_directory_is_a_located_error(fake, tmp_path):
    script = tmp_path / "study.py"
    script.write_text(KILLABLE.format(root=str(ROOT), tests=str(ROOT / "tests")))
    db = tmp_path / "s.db"
    base = [sys.executable, str(script)]
    assert study("run", "--db", str(db)) == 0  # (the reports below need processes of their own)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    kw = dict(capture_output=True, text=True, timeout=120,
              preexec_fn=_without_root_override if os.geteuid() == 0 else None)
    try:
        for out in (ro, ro / "rep"):
            try:
                p = subprocess.run(base + ["report", str(db), "-o", str(out)], **kw)
            except subprocess.SubprocessError as e:
                pytest.skip(f"root cannot give up its override of file modes here: {e}")
            assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
            assert p.stderr.startswith(f"taxcompile: error: cannot write the report into "
                                       f"{out}: Permission denied"), p.stderr
            assert "(nothing written)" in p.stderr and p.stdout == ""
            assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


def test_pydantic_stays_out_of_the_front_end():
    """The cold front end (parse, check, classify, table) never imports pydantic; only the
    study's reading of a file does."""
    code = (f"import contextlib, io, sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from taxcompile.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    for cmd in ('check', 'classify', 'table'):\n"
            f"        assert main([cmd, {str(ROOT / 'specs')!r}]) == 0, cmd\n"
            "print('pydantic' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.stdout.strip() == "False", p.stderr


def test_a_skip_of_no_task_is_stored_once_however_often_the_study_resumes(tmp_path):
    from taxcompile.study import cli, report
    from taxcompile.study.runs import Skip

    db = tmp_path / "s.db"
    skips = [Skip("mine.attn", "tiny", None, "no task fits: copy: …"),
             Skip("mine.attn", "pooled", "pair_recall", "no `z`")]
    for _ in range(3):  # three resumes of one study
        with Store.create_or_open(db, cli.protocol_record("smoke")) as store:
            store.put_skips(skips)
    with Store.read(db) as store:
        doc = report.document(store)
    assert [(s["model"], s["task"]) for s in doc["skips"]] == [("pooled", "pair_recall"),
                                                               ("tiny", None)]
    assert report.to_md(doc).count("model tiny: no task fits") == 1


# ---- a study file of the older layout ------------------------------------------------------

# layout 1 (protocol 1), as taxcompile wrote it before the learning curves and the test
# batch: no `val_accuracy`, no `curve`
LAYOUT_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE results (
    key TEXT PRIMARY KEY,
    model_hash TEXT NOT NULL, task TEXT NOT NULL, seed INTEGER NOT NULL,
    protocol_version TEXT NOT NULL, supervised INTEGER NOT NULL,
    source TEXT NOT NULL, spec TEXT NOT NULL, model TEXT NOT NULL, profile TEXT NOT NULL,
    lr REAL, params INTEGER, steps INTEGER, steps_to_threshold INTEGER,
    seconds REAL, seconds_per_step REAL, accuracy REAL, final_loss REAL,
    row TEXT NOT NULL, attention TEXT NOT NULL, engine TEXT NOT NULL, finished REAL NOT NULL,
    UNIQUE (model_hash, task, seed, protocol_version, supervised)
);
CREATE TABLE skips (
    source TEXT NOT NULL, model TEXT NOT NULL, task TEXT, why TEXT NOT NULL,
    UNIQUE (source, model, task)
);
"""


def _layout_1(db: Path) -> None:
    import json

    conn = sqlite3.connect(db)
    conn.executescript(LAYOUT_1)
    conn.execute("PRAGMA application_id = 1413698388")  # "TCST"
    conn.execute("PRAGMA user_version = 1")
    settings = {"version": "1", "threshold": 0.99, "seeds": [0, 1], "eval_batch": 128}
    row = json.dumps(study_fake.BASE)
    with conn:
        conn.execute("INSERT INTO meta VALUES ('protocol', ?)", (json.dumps(
            {"version": "1", "profile": "smoke", "settings": settings}),))
        for seed, acc in ((0, 0.5), (1, 0.75)):
            conn.execute("INSERT INTO results VALUES (?, 'h', 'copy', ?, '1', 0, 'a.attn', "
                         "'spec', 'm', 'smoke', 0.01, 100, 60, NULL, 1.0, 0.01, ?, 0.7, ?, "
                         "'{}', 'local', 0)", (f"k{seed}", seed, acc, row))
    conn.close()


def test_a_study_file_of_layout_1_is_reported_without_curves_and_never_written(tmp_path,
                                                                                capsys):
    """A file written before the learning curves (layout 1, protocol 1) is still read by
    `study report`: its runs have no curve (null) and the report says what protocol 1 was;
    `study run` refuses to add to it, in one line, and leaves it as it is."""
    db = tmp_path / "old.db"
    _layout_1(db)
    data = db.read_bytes()
    assert study("report", str(db), "--format", "json") == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert [(r["seed"], r["accuracy"], r["curve"]) for r in doc["runs"]] == \
        [(0, 0.5, None), (1, 0.75, None)]
    assert study("report", str(db)) == 0
    assert "Protocol 1: one evaluation batch stopped training" in capsys.readouterr().out
    err = _fails(capsys, "run", "--db", str(db))
    assert err.startswith(f"taxcompile: error: {db} is a study file of layout 1 (protocol 1: "
                          "one evaluation batch, no learning curves); this taxcompile writes "
                          "layout 3 only\n"), err
    assert f"`taxcompile study report {db}` still reads it" in err
    assert db.read_bytes() == data
