"""What `study run` does with numbers out of proportion: more workers than runs or cores,
a parameter count no model reaches, a Ray address where no cluster answers
(taxcompile/study/cli.py, plan.py, engines.py). Each is bounded and said."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

import study_fake
from conftest import ROOT
from test_study_engine import KILLABLE, fake, study  # noqa: F401
from taxcompile.study import cli, engines
from taxcompile.study import plan as P
from taxcompile.study import runner
from taxcompile.study.runs import StudyError


def test_workers_are_capped_at_the_pending_runs_and_more_than_the_cores_is_said(
        fake, monkeypatch, tmp_path, capsys):
    started = []
    real_local = engines.local

    def local(runs, workers, target):
        started.append(workers)
        return real_local(runs, workers, target)

    monkeypatch.setattr(engines, "local", local)
    monkeypatch.setattr(cli, "_cores", lambda: 2)
    n = len(study_fake.VARIANTS)
    assert study("run", "--db", str(tmp_path / "s.db"), "--workers", "99999") == 0
    err = capsys.readouterr().err
    assert started == [n]
    assert f"taxcompile: note: --workers 99999 is more than the 2 cores here; starting {n} " \
           "(at most one per pending run), which share them\n" in err, err
    assert f"{n} to train on {n} local worker(s)" in err, err
    # within the cores: as asked, and nothing said
    assert study("run", "--db", str(tmp_path / "t.db"), "--workers", "2") == 0
    err = capsys.readouterr().err
    assert started == [n, 2] and "note: --workers" not in err


@pytest.mark.parametrize("target, why", [
    (1, "parameters at its smallest width (2), more than 1 + 10%"),
    (10 ** 12, "parameters at its largest width (2048), fewer than 1,000,000,000,000 - 10%"),
])
def test_params_no_model_reaches_is_refused_after_one_build_per_model(monkeypatch, tmp_path,
                                                                      capsys, target, why):
    """Each model is built once and counted at the two ends of the widths (the count grows
    with the width), not searched through a dozen builds, and the study is refused."""
    pytest.importorskip("torch")
    builds = []
    real_build = runner.build

    def build(run):
        builds.append(run.model)
        return real_build(run)

    monkeypatch.setattr(runner, "build", build)
    db = tmp_path / "s.db"
    assert study("run", "--tasks", "keyword", "--params", str(target), "--db", str(db),
                 "--dry-run") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"taxcompile: error: --params {target:,}: no model of the study "
                          "comes within 10% of it at any width from 2 to 2048 (model "
                          "study_base on keyword: it has "), err
    assert why in err and "Traceback" not in err, err
    models, skips = P._slice(P.profile("smoke"), ["keyword"], None)
    assert len(builds) <= len(models) + 1, (len(builds), len(models))  # (+ supervised twin)
    assert not db.exists()


def test_params_counted_on_the_meta_device_match_a_real_model():
    pytest.importorskip("torch")
    m = P.Mdl.slice_models("keyword", 16)[0]
    count = P.counter(P.Mdl.spec_text(m), m.name)
    for d in (2, 16, 40):
        from dataclasses import replace
        mm = replace(m, d=d)
        assert count(d) == P.count_params(P.Mdl.spec_text(mm), mm.name)


def _script(tmp_path) -> list[str]:
    script = tmp_path / "study.py"
    script.write_text(KILLABLE.format(root=str(ROOT), tests=str(ROOT / "tests")))
    return [sys.executable, str(script)]


def _session() -> str | None:
    try:
        return os.readlink("/tmp/ray/session_latest")
    except OSError:
        return None


def _ray_run(tmp_path, address: str, timeout: str):
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    before = _session()
    start = time.monotonic()
    p = subprocess.run(_script(tmp_path) + ["run", "--db", str(tmp_path / "s.db"), "--engine",
                                            "ray", "--address", address,
                                            "--connect-timeout", timeout],
                       capture_output=True, text=True, timeout=60, env=env)
    took = time.monotonic() - start
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    # no local Ray was started in its place
    assert "local Ray instance" not in p.stderr and _session() == before
    return p.stderr, took


def test_a_ray_address_where_nothing_listens_is_a_clear_error_at_once(tmp_path):
    err, took = _ray_run(tmp_path, "127.0.0.1:1", "5")
    assert "taxcompile: error: cannot connect to the Ray cluster at 127.0.0.1:1: Connection " \
           "refused\n  hint: start one with `ray start --head`" in err, err
    assert took < 20, took


def test_a_ray_address_that_never_answers_times_out(tmp_path):
    """A port that accepts the connection and then says nothing (no Ray there): Ray's
    connect would wait on; the study gives up after --connect-timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        err, took = _ray_run(tmp_path, address, "2")
    assert f"taxcompile: error: cannot connect to the Ray cluster at {address}: no answer " \
           "within 2 s\n" in err, err
    assert "or wait longer with --connect-timeout" in err
    assert took < 25, took


def test_connect_timeout_must_be_positive(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["run", "--engine", "ray", "--connect-timeout", "0"])
    assert e.value.code == 2
    assert "must be a positive number of seconds" in capsys.readouterr().err
    with pytest.raises(StudyError):
        engines._probe("127.0.0.1:1", 1.0)
