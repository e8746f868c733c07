"""The JSON taxcompile writes for other programs, and reads back, against its pydantic
models (taxcompile/schemas.py): the published JSON Schemas (``taxcompile schema
classify|study``, copies in docs/schema/) accept the real outputs of the commands, and a
damaged manifest or document is an error naming the field, never a traceback."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
from conftest import ROOT
from test_safety import TINY, assert_refused, run, snapshot
from test_study_engine import fake, study  # noqa: F401

jsonschema = pytest.importorskip("jsonschema")

SPECS = sorted((ROOT / "specs").glob("*.attn"))


def taxcompile(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "taxcompile", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def schema_of(name: str) -> dict:
    p = taxcompile("schema", name)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return json.loads(p.stdout)


def validate(schema: dict, doc) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]]


# ---- the schemas accept what the commands write ----------------------------------------------


def test_classify_json_of_every_spec_matches_the_published_schema(tmp_path):
    (tmp_path / "tiny.attn").write_text(TINY)  # a paper without a reference
    p = taxcompile("classify", *(str(s.relative_to(ROOT)) for s in SPECS),
                   str(tmp_path / "tiny.attn"), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert len(doc) == len(SPECS) + 1 and doc[-1]["ref"] is None
    schema = schema_of("classify")
    validate(schema, doc)
    # not vacuous: a label of the wrong type, an unknown dimension, a field left out
    bad = json.loads(p.stdout)
    bad[0]["variants"][0]["dimensions"]["scoring"][0]["value"] = 3
    bad[1]["variants"][0]["dimensions"]["colour"] = []
    del bad[2]["paper"]
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(bad))
    assert {tuple(e.absolute_path)[:2] for e in errors} >= {(0, "variants"), (1, "variants")}
    assert any("'paper' is a required property" in e.message for e in errors)


def test_study_report_json_matches_the_published_schema(fake, tmp_path, capsys):  # noqa: F811
    db = tmp_path / "s.db"
    assert study("run", "--db", str(db), "--workers", "1", "--steps", "40,400") == 0
    capsys.readouterr()
    assert study("report", str(db), "--format", "json", "-o", str(tmp_path / "out")) == 0
    printed = capsys.readouterr().out
    doc = json.loads(printed)
    assert doc["runs"] and doc["effects"] and doc["interactions"] and doc["skips"]
    validate(schema_of("study"), doc)
    assert (tmp_path / "out" / "report.json").read_text(encoding="utf-8") == printed


@pytest.mark.parametrize("name", ["classify", "study"])
def test_committed_schemas_are_the_commands_output(name):
    committed = (ROOT / "docs" / "schema" / f"{name}.json").read_text(encoding="utf-8")
    assert committed == taxcompile("schema", name).stdout, (
        f"docs/schema/{name}.json is stale: run `taxcompile schema {name} -o "
        f"docs/schema/{name}.json`")


# ---- the command ----------------------------------------------------------------------------


def test_schema_command_writes_a_file_and_refuses_in_one_line(tmp_path):
    out = tmp_path / "classify.json"
    out.write_text("old\n")
    p = taxcompile("schema", "classify", "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert out.read_text(encoding="utf-8") == taxcompile("schema", "classify").stdout
    assert sorted(x.name for x in tmp_path.iterdir()) == ["classify.json"]  # no temp left
    for args, words in ((["schema", "clasify"], "no schema named `clasify`: choose classify "
                         "or study"),
                        (["schema", "study", "-o", str(tmp_path)], "cannot write")):
        p = taxcompile(*args)
        assert p.returncode == 2 and p.stdout == "", p
        assert p.stderr.count("\n") == 1 and p.stderr.startswith("taxcompile: error: "), p.stderr
        assert words in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["classify.json"]


# ---- damaged documents: an error naming the field --------------------------------------------


def test_a_writer_that_strays_from_its_schema_is_refused_naming_the_field():
    from pydantic import ValidationError

    from taxcompile import schemas

    doc = json.loads(taxcompile("classify", "specs/bahdanau2015.attn", "--format",
                                "json").stdout)
    schemas.dump("classify", doc)
    doc[0]["variants"][0]["dimensions"]["alignment"][0]["because"] = "one reason"
    with pytest.raises(ValidationError) as e:
        schemas.dump("classify", doc)
    assert schemas.problem(e.value).startswith("`0.variants.0.dimensions.alignment.0.because`")


GOOD = hashlib.sha256(b"x").hexdigest()


@pytest.mark.parametrize("manifest, field", [
    ({"written by": "taxcompile report", "files": {"index.html": "abc"}},
     "`files.index.html`: String should match pattern"),
    ({"written by": "someone", "files": {}}, "`written by`: Input should be 'taxcompile report'"),
    ({"written by": "taxcompile report", "files": {"../thesis.tex": GOOD}},
     "`files.../thesis.tex.[key]`: Value error, a file name must be a relative path"),
    ({"written by": "taxcompile report"}, "`files`: Field required"),
    ({"written by": "taxcompile report", "files": {}, "pending": [GOOD]},
     "`pending`: Input should be an object"),
    ("{not json", "Invalid JSON"),
])
def test_a_damaged_report_manifest_is_one_line_naming_the_field(tmp_path, manifest, field):
    from taxcompile.files import MANIFEST

    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "tiny.attn").write_text(TINY)
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<p>mine</p>\n")
    (site / MANIFEST).write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    before = snapshot(tmp_path)
    p = run("report", "specs", "-o", "site", cwd=tmp_path)
    assert_refused(p, f"cannot write the report to site: its {MANIFEST}", "is damaged", field)
    assert snapshot(tmp_path) == before
