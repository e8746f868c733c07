"""`taxcompile report` says what it is doing while it trains the heatmaps' models: a line
per model with its steps and the time left; with --jobs the models train in worker
processes into the cache, from which the report then reads the same weights."""

import re

import pytest

from conftest import ROOT

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from taxcompile import pipeline, report, train  # noqa: E402

SPECS = [ROOT / "examples" / "alibi.attn", ROOT / "examples" / "memory_network.attn"]


def test_a_line_per_model_and_parallel_training_fills_the_cache(tmp_path, monkeypatch):
    specs = [(p, pipeline.load(p)) for p in SPECS]
    read = []  # the report's own train() calls (the workers' are in other processes)
    trainer = train.train
    monkeypatch.setattr(train, "train", lambda *a, **k: read.append(trainer(*a, **k)) or read[-1])
    cache = tmp_path / "cache"
    lines: list[str] = []
    report.build(specs, tmp_path / "a", train_steps=4, cache=cache, progress=lines.append,
                 jobs=2)
    assert lines[0].startswith("heatmaps: 2 models, each trained up to 4 steps") \
        and lines[0].endswith("2 at a time")
    done = sorted(lines[1:])
    assert len(done) == 2 and all(re.fullmatch(
        r"heatmap [12]/2 (press2022_alibi|sukhbaatar2015_memn2n): 4 steps, [\d.]+ s"
        r"(; about \d+ s left)?", line) for line in done), lines
    assert "left" in lines[1] and "left" not in lines[2]
    # the workers trained into the cache under the keys the report reads: the report
    # found every model there
    from taxcompile import codegen

    assert [t.cached for t in read] == [True, True]
    keys = {train.cache_key(codegen.generate(cs, cm, codegen.source_name(p)), 4)
            for p, cs in specs for cm in cs.models}
    assert {f.stem for f in cache.glob("*.pt")} == keys
