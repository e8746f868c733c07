"""Torch threads for training: what the user set, else the cores the load leaves free."""

import pytest

from taxcompile import threads


@pytest.mark.parametrize("load, want", [(0.0, 8), (0.4, 7), (3.0, 5), (6.9, 1), (7.5, 1),
                                        (40.0, 1)])
def test_threads_are_the_cores_the_load_leaves_free(load, want):
    n, why = threads.choose(environ={}, load_avg=load, ncores=8)
    assert n == want and why == f"8 cores at load {load:.1f}"


def test_the_load_is_read_from_the_system(monkeypatch):
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (2.5, 9.0, 9.0))
    monkeypatch.setattr(threads, "cores", lambda: 4)
    assert threads.choose(environ={}) == (1, "4 cores at load 2.5")


def test_what_the_user_set_wins_over_the_load():
    busy = dict(load_avg=30.0, ncores=4)
    assert threads.choose(3, environ={"OMP_NUM_THREADS": "2"}, **busy) == (3, "as asked")
    assert threads.choose(environ={"OMP_NUM_THREADS": "2"}, **busy) == (2, "from OMP_NUM_THREADS")
    env = {"OMP_NUM_THREADS": "2", "TORCH_NUM_THREADS": "6"}
    assert threads.choose(environ=env, **busy) == (6, "from TORCH_NUM_THREADS")
    assert threads.choose(environ={"OMP_NUM_THREADS": " "}, **busy)[0] == 1  # blank: unset


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_thread_count_that_is_not_one_is_an_error_naming_its_source(value):
    with pytest.raises(ValueError, match=f"OMP_NUM_THREADS: expected a positive whole number "
                       f"of threads, got '{value}'"):
        threads.choose(environ={"OMP_NUM_THREADS": value}, load_avg=0, ncores=2)
    with pytest.raises(ValueError, match="threads: expected a positive whole number"):
        threads.choose(0, environ={})


def test_a_study_starts_as_many_workers_as_the_load_leaves_cores(monkeypatch):
    from taxcompile.study import cli

    monkeypatch.setattr(cli, "_cores", lambda: 8)
    monkeypatch.setattr(threads, "load", lambda: 5.2)
    assert cli._workers(None, pending=100) == 2
    assert cli._workers(None, pending=1) == 1
    assert cli._workers(6, pending=100) == 6  # as asked
    monkeypatch.setattr(threads, "load", lambda: 0.0)
    assert cli._workers(None, pending=100) == 8
