"""Subprocess tests of the ``taxcompile`` command line.

Exit codes: 0 ok, 1 errors in a spec, 2 usage errors. Every run is
``[sys.executable, "-m", "taxcompile", ...]`` in the repository root.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VASWANI = "specs/vaswani2017.attn"
BAHDANAU = "specs/bahdanau2015.attn"
LUONG = "specs/luong2015.attn"  # four model variants

DIMENSIONS = ("feature_multiplicity", "feature_levels", "feature_representations", "scoring",
              "alignment", "dimensionality", "query_type", "query_multiplicity")
# Values that say "nothing special here" (their rationale has no node to name).
DEFAULT_VALUES = {"Singular", "Single-Level", "Single-Representational"}
NODE_KINDS = {"input", "feature", "query", "output", "affinity", "attention"}
EDGE_ROLES = {"query", "keys", "values", "affinity", "input", "feed", "init"}
VASWANI_ROW = {
    "paper": "Vaswani et al.", "ref": "13", "feature_multiplicity": "Singular",
    "feature_levels": "Single-Level", "feature_representations": "Single-Representational",
    "scoring": "Scaled Multiplicative", "alignment": "Global",
    "dimensionality": "Single-Dimensional", "query_type": "Self-Attentive + Basic",
    "query_multiplicity": "Multi-Head + Multi-Hop",
}
LOCATED_ERROR = re.compile(r"^(?P<file>[^\n:]+):(?P<line>\d+):(?P<col>\d+): error: ", re.M)

INVALID_SPEC = """\
paper broken {
    cite = "Broken et al."
}

model m {
    input src: tokens[S] (vocab = 100)
    feature h = embed(src, 64)
    attention att {
        query    = learned(64)
        features = nowhere
        score    = additive(d_w = 32)
    }
    output o = classify(att, 3)
}
"""


VALID_BODY = """\
model m {
    input src: tokens[S] (vocab = 100)
    feature x = embed(src, 64)
    attention a { query = project(x)  keys = x  score = multiplicative }
}
"""


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "taxcompile", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def assert_usage_error(p: subprocess.CompletedProcess) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    assert "usage:" in p.stderr, p.stderr
    assert "error:" in p.stderr, p.stderr


def assert_no_traceback(p: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in p.stderr + p.stdout, p.stderr


@pytest.fixture
def invalid_spec(tmp_path: Path) -> Path:
    f = tmp_path / "broken.attn"
    f.write_text(INVALID_SPEC, encoding="utf-8")
    return f


# ---------------------------------------------------------------------------------------
# --help
# ---------------------------------------------------------------------------------------


def test_tool_help():
    p = run("--help")
    assert p.returncode == 0, p.stderr
    for word in ("usage:", "--version", "check", "classify", "table", "graph"):
        assert word in p.stdout, word
    assert p.stderr == ""


def test_version():
    p = run("--version")
    assert p.returncode == 0
    assert re.match(r"taxcompile \d+\.\d+", p.stdout.strip()), p.stdout


@pytest.mark.parametrize("sub, words", [
    ("check", ["FILE"]),
    ("classify", ["FILE", "--format", "text", "json"]),
    ("table", ["PATH", "--format", "md", "csv", "latex", "--all"]),
    ("graph", ["FILE", "--format", "json", "graphml", "--model"]),
])
def test_subcommand_help(sub, words):
    p = run(sub, "--help")
    assert p.returncode == 0, p.stderr
    assert f"usage: taxcompile {sub}" in p.stdout, p.stdout
    for w in words + ["-h, --help"]:
        assert w in p.stdout, (sub, w, p.stdout)


# ---------------------------------------------------------------------------------------
# Usage errors: exit 2, a usage line, no traceback
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    [],                                         # no subcommand
    ["frobnicate"],                             # unknown subcommand
    ["frobnicate", VASWANI],
    ["check"],                                  # missing FILE
    ["classify"],
    ["table"],
    ["graph"],
    ["graph", VASWANI, LUONG],                  # graph takes one FILE
    ["classify", "--format", "xml", VASWANI],   # bad --format
    ["classify", "--format", VASWANI],          # --format without a value
    ["table", "--format", "html", VASWANI],
    ["table", "--format", "json", VASWANI],
    ["graph", "--format", "dot", VASWANI],
    ["graph", "--format", "text", VASWANI],
    ["check", "--no-such-option", VASWANI],     # unknown option
    ["--no-such-option"],
])
def test_usage_errors_exit_2(args):
    p = run(*args)
    assert_usage_error(p)
    assert p.stdout == "", p.stdout


def test_bad_format_names_the_choices():
    p = run("table", "--format", "html", VASWANI)
    assert_usage_error(p)
    assert "invalid choice" in p.stderr and "'md'" in p.stderr, p.stderr


@pytest.mark.parametrize("sub", ["check", "classify", "table", "graph"])
def test_missing_file_exits_2(sub, tmp_path):
    missing = tmp_path / "does_not_exist.attn"
    p = run(sub, str(missing))
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert_no_traceback(p)
    assert "no such file" in p.stderr and str(missing) in p.stderr, p.stderr
    assert p.stdout == ""


def test_directory_without_specs_exits_2(tmp_path):
    for sub in ("check", "table"):
        p = run(sub, str(tmp_path))
        assert p.returncode == 2, (sub, p.returncode, p.stderr)
        assert_no_traceback(p)
        assert "no .attn files" in p.stderr


def test_graph_unknown_model_exits_2():
    p = run("graph", LUONG, "--model", "no_such_model")
    assert p.returncode == 2
    assert_no_traceback(p)
    assert "no_such_model" in p.stderr
    assert p.stdout == ""


def test_graph_refuses_a_directory():
    p = run("graph", "specs/")
    assert_no_traceback(p)
    assert p.returncode in (1, 2), (p.returncode, p.stdout[:200])


# ---------------------------------------------------------------------------------------
# check
# ---------------------------------------------------------------------------------------


def test_check_valid_spec():
    p = run("check", VASWANI)
    assert p.returncode == 0, p.stderr
    assert f"{VASWANI}: ok" in p.stdout
    assert "transformer" in p.stdout
    assert p.stderr == ""


def test_check_several_valid_specs():
    p = run("check", VASWANI, BAHDANAU, LUONG)
    assert p.returncode == 0, p.stderr
    assert "(4 models: global_dot, local_m, local_p, global_location)" in p.stdout, p.stdout
    assert len(p.stdout.strip().splitlines()) == 3


def test_check_invalid_spec_exits_1(invalid_spec):
    p = run("check", str(invalid_spec))
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert_no_traceback(p)
    m = LOCATED_ERROR.search(p.stderr)
    assert m, p.stderr
    assert m["file"] == str(invalid_spec)
    assert (int(m["line"]), int(m["col"])) == (10, 20), p.stderr  # `nowhere`
    assert "nowhere" in p.stderr
    assert "^" in p.stderr  # a caret under the column
    assert p.stdout == ""


def test_check_mixed_valid_and_invalid(invalid_spec):
    """Every file is checked; one bad file makes the exit status 1."""
    p = run("check", VASWANI, str(invalid_spec), BAHDANAU)
    assert p.returncode == 1
    assert_no_traceback(p)
    assert f"{VASWANI}: ok" in p.stdout and f"{BAHDANAU}: ok" in p.stdout
    assert LOCATED_ERROR.search(p.stderr), p.stderr


@pytest.mark.parametrize("content", [
    b"\xff\xfe\x00garbage",                     # not UTF-8
    b"paper p { cite = \"x\" }\nmodel m {\x00}",  # NUL byte
    b"model m {",                               # unexpected end of file
    b"",                                        # empty file
    b"(" * 200,                                 # deep nesting
])
def test_check_garbage_is_a_located_error(tmp_path, content):
    f = tmp_path / "garbage.attn"
    f.write_bytes(content)
    p = run("check", str(f))
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert_no_traceback(p)
    assert re.search(re.escape(str(f)) + r":\d+:\d+: error: ", p.stderr), p.stderr


def test_check_directory_checks_every_spec():
    p = run("check", "specs/")
    assert_no_traceback(p)
    assert p.returncode in (0, 1)  # others are editing specs/ right now
    n_ok = p.stdout.count(": ok (")
    n_err = len({m["file"] for m in LOCATED_ERROR.finditer(p.stderr)})
    assert n_ok + n_err == len(list((ROOT / "specs").glob("*.attn")))


# ---------------------------------------------------------------------------------------
# classify
# ---------------------------------------------------------------------------------------


def _classify_json(*files: str) -> list[dict]:
    p = run("classify", "--format", "json", *files)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("spec", [VASWANI, BAHDANAU, LUONG])
def test_classify_json_structure(spec):
    docs = _classify_json(spec)
    assert len(docs) == 1
    doc = docs[0]
    assert doc["file"] == spec
    assert set(doc["row"]) == {"paper", "ref"} | set(DIMENSIONS)
    assert doc["variants"], doc
    text = (ROOT / spec).read_text(encoding="utf-8")
    for v in doc["variants"]:
        assert v["model"] and f"model {v['model']}" in text
        assert list(v["dimensions"]) == list(DIMENSIONS)
        for dim, vals in v["dimensions"].items():
            assert vals, (v["model"], dim)
            for x in vals:
                assert isinstance(x["value"], str) and x["value"], x
                assert x["value"] in doc["row"][dim], (dim, x["value"], doc["row"][dim])
                assert x["because"] and all(isinstance(b, str) and b for b in x["because"]), x
                if x["value"] in DEFAULT_VALUES:
                    continue
                for why in x["because"]:
                    names = re.findall(r"`([^`]+)`", why)
                    assert names, (dim, x["value"], why)
                    for name in names:  # each backticked node is named in the spec
                        for part in re.split(r"[.\[\]@]+", name):
                            if part and not part.isdigit():
                                assert re.search(rf"\b{re.escape(part)}\b", text), (name, why)


def test_classify_json_matches_row_of_each_variant():
    doc = _classify_json(LUONG)[0]
    assert [v["model"] for v in doc["variants"]] == ["global_dot", "local_m", "local_p",
                                                     "global_location"]
    assert doc["row"]["scoring"] == "Multiplicative, Location"
    assert doc["row"]["alignment"] == "Global, Local"
    scores = [[x["value"] for x in v["dimensions"]["scoring"]] for v in doc["variants"]]
    assert scores == [["Multiplicative"]] * 3 + [["Location"]]


def test_every_rationale_names_a_node():
    doc = _classify_json(VASWANI)[0]
    for v in doc["variants"]:
        for dim, vals in v["dimensions"].items():
            for x in vals:
                for why in x["because"]:
                    assert re.search(r"`[^`]+`", why), (dim, x["value"], why)


def test_classify_text_vaswani():
    p = run("classify", VASWANI)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "Vaswani et al. [13]" in out
    assert "model transformer" in out
    assert "Multi-Head: attention `encoder.self` has 8 heads" in out
    for dim in DIMENSIONS:
        assert f"    {dim.replace('_', ' ')}: " in out, dim
    assert "query multiplicity: Multi-Head + Multi-Hop" in out


def test_classify_text_without_ref_prints_no_brackets(tmp_path):
    """A spec without `ref` (not in the survey) is headed by its citation alone."""
    spec = tmp_path / "toy.attn"
    spec.write_text('paper toy { cite = "Toy Luong" }\n' + VALID_BODY, encoding="utf-8")
    p = run("classify", str(spec))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == f"Toy Luong  ({spec})"
    assert _classify_json(str(spec))[0]["ref"] is None


def test_dot_is_luongs_name_for_the_multiplicative_score():
    """`score = dot` (Luong et al.'s name) is the multiplicative score: the same IR,
    the same Table III cells and the same generated code."""
    from taxcompile import codegen, pipeline

    text = (ROOT / LUONG).read_text(encoding="utf-8")
    assert text.count("score    = multiplicative") == 3
    dot = text.replace("score    = multiplicative", "score    = dot")
    a, b = pipeline.load_text(text, LUONG), pipeline.load_text(dot, LUONG)
    assert [m.model for m in a.models] == [m.model for m in b.models]
    assert pipeline.classify_spec(a).row() == pipeline.classify_spec(b).row()
    for ma, mb in zip(a.models, b.models):
        assert codegen.generate(a, ma, LUONG) == codegen.generate(b, mb, LUONG)


def test_unknown_score_hint_lists_every_score(tmp_path):
    spec = tmp_path / "s.attn"
    spec.write_text('paper s { cite = "S" }\n' + VALID_BODY.replace("multiplicative", "zzz"),
                    encoding="utf-8")
    p = run("check", str(spec))
    assert p.returncode == 1
    hint = next(line for line in p.stderr.splitlines() if "hint:" in line)
    assert "more)" not in hint
    for name in ("additive", "concat", "multiplicative", "dot", "max_pool", "affinity"):
        assert f"`{name}`" in hint, name


def test_keywords_are_names_where_they_are_not_keywords(tmp_path):
    """Models may be called `global`, `local`, `soft`, `model` or `class` (their names are
    only file names), and alignment names and statement keywords (`soft`, `model`,
    `input`, `shared`) name features: each is a keyword only in its own position."""
    body = VALID_BODY.replace("feature x", "feature model").replace(
        "project(x)  keys = x", "project(model)  keys = soft").replace(
        "    attention", "    feature soft = norm(model)\n    feature input = norm(soft)\n"
        "    feature shared = norm(input)\n    attention")
    names = ("global", "local", "soft", "model", "class")
    text = 'paper toy { cite = "Toy" }\n' + "".join(
        body.replace("model m {", f"model {n} {{", 1) for n in names)
    spec = tmp_path / "toy.attn"
    spec.write_text(text, encoding="utf-8")
    p = run("check", str(spec))
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"{spec}: ok (5 models: {', '.join(names)})\n"
    out = tmp_path / "out"
    p = run("compile", str(spec), "-o", str(out))
    assert p.returncode == 0, p.stderr
    for n in names:
        source = (out / f"toy_{n}.py").read_text(encoding="utf-8")
        compile(source, f"toy_{n}.py", "exec")  # valid Python: the name is no identifier


def test_classify_text_is_default_and_json_agrees():
    text = run("classify", BAHDANAU).stdout
    doc = _classify_json(BAHDANAU)[0]
    for dim in DIMENSIONS:
        values = " + ".join(x["value"] for x in doc["variants"][0]["dimensions"][dim])
        assert f"{dim.replace('_', ' ')}: {values}" in text


def test_classify_invalid_spec_exits_1(invalid_spec):
    p = run("classify", "--format", "json", VASWANI, str(invalid_spec))
    assert p.returncode == 1
    assert_no_traceback(p)
    assert LOCATED_ERROR.search(p.stderr)
    docs = json.loads(p.stdout)  # the valid spec is still classified
    assert [d["file"] for d in docs] == [VASWANI]


# ---------------------------------------------------------------------------------------
# graph
# ---------------------------------------------------------------------------------------


def _graph_json(spec: str, *extra: str) -> dict | list:
    p = run("graph", spec, "--format", "json", *extra)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _check_graph_doc(g: dict) -> None:
    assert g["directed"] is True
    assert g["nodes"], g
    ids = set()
    for n in g["nodes"]:
        assert n["kind"] in NODE_KINDS, n
        assert n["id"] and n["id"] not in ids
        ids.add(n["id"])
        assert "shape" in n and "loc" in n, n
    assert g["edges"], g
    for e in g["edges"]:
        assert e["source"] in ids and e["target"] in ids, e
        assert e["role"] and set(e["role"].split("+")) <= EDGE_ROLES, e
        assert isinstance(e["shape"], str) and e["shape"].startswith("("), e
    kinds = {n["kind"] for n in g["nodes"]}
    assert {"input", "attention", "output"} <= kinds, kinds


@pytest.mark.parametrize("spec", [VASWANI, BAHDANAU])
def test_graph_json(spec):
    g = _graph_json(spec)
    assert isinstance(g, dict)
    _check_graph_doc(g)


def test_graph_json_bahdanau_has_decoder_edges():
    """s_i = f(s_(i-1), y_(i-1), c_i): the GRU reads this step's context (a `feed` edge that
    is not delayed), the attention's query is s_(i-1) (`s_prev = prev(s)`: a delayed edge
    into it), and s_0 comes from the encoder (an `init` edge)."""
    g = _graph_json(BAHDANAU)
    edges = {(e["source"], e["target"]): e for e in g["edges"]}
    assert edges[("att", "s")]["role"] == "feed" and edges[("att", "s")]["delayed"] is False
    assert edges[("s", "s_prev")]["delayed"] is True
    assert edges[("s_prev", "att")]["role"] == "query"
    assert edges[("s_prev", "att")]["delayed"] is False
    assert edges[("s0", "s")]["role"] == "init" and edges[("s0", "s")]["delayed"] is False
    assert [e for e in g["edges"] if e["delayed"]] == [edges[("s", "s_prev")]]
    att = next(n for n in g["nodes"] if n["id"] == "att")
    assert att["kind"] == "attention" and att["score"] == "additive"


def test_graph_json_several_models_is_a_list():
    gs = _graph_json(LUONG)
    assert isinstance(gs, list) and len(gs) == 4
    for g in gs:
        _check_graph_doc(g)
    one = _graph_json(LUONG, "--model", "local_p")
    assert isinstance(one, dict) and one["graph"]["name"] == "local_p"


GRAPHML_NS = "{http://graphml.graphdrawing.org/xmlns}"


@pytest.mark.parametrize("spec", [VASWANI, BAHDANAU])
def test_graph_graphml_matches_json(spec):
    p = run("graph", spec, "--format", "graphml")
    assert p.returncode == 0, p.stderr
    root = ET.fromstring(p.stdout)
    nodes = root.findall(f".//{GRAPHML_NS}node")
    edges = root.findall(f".//{GRAPHML_NS}edge")
    g = _graph_json(spec)
    assert len(nodes) == len(g["nodes"])
    assert len(edges) == len(g["edges"])
    assert {n.get("id") for n in nodes} == {n["id"] for n in g["nodes"]}


# ---------------------------------------------------------------------------------------
# table
# ---------------------------------------------------------------------------------------


def test_table_md():
    p = run("table", VASWANI, "--format", "md")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("| Paper | Feature multiplicity |")
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells == ["Vaswani et al. [13]"] + [VASWANI_ROW[d] for d in DIMENSIONS]
    assert run("table", VASWANI).stdout == p.stdout  # md is the default


def test_table_csv():
    p = run("table", VASWANI, "--format", "csv")
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert rows == [VASWANI_ROW]


def test_table_latex():
    p = run("table", VASWANI, "--format", "latex")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert r"\begin{tabular}" in out and r"\end{table*}" in out
    row = (r"Vaswani et al. \cite{ref13} & " + " & ".join(VASWANI_ROW[d] for d in DIMENSIONS)
           + r" \\")
    assert row in out, out


def test_table_directory_orders_by_survey_row():
    p = run("table", "specs/", "--format", "csv")
    assert_no_traceback(p)
    assert p.returncode in (0, 1)  # specs/ is being edited by others
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    papers = [r["paper"] for r in rows]
    assert "Vaswani et al." in papers and "Bahdanau et al." in papers
    assert papers.index("Bahdanau et al.") < papers.index("Luong et al.") \
        < papers.index("Vaswani et al.")
    assert next(r for r in rows if r["paper"] == "Vaswani et al.") == VASWANI_ROW
    allrows = list(csv.DictReader(io.StringIO(run("table", "specs/", "--all",
                                                  "--format", "csv").stdout)))
    assert len(allrows) >= len(rows)


def test_table_invalid_spec_exits_1(invalid_spec):
    p = run("table", VASWANI, str(invalid_spec), "--format", "csv")
    assert p.returncode == 1
    assert_no_traceback(p)
    assert LOCATED_ERROR.search(p.stderr)
    assert list(csv.DictReader(io.StringIO(p.stdout))) == [VASWANI_ROW]


# ---------------------------------------------------------------------------------------
# The front end never imports torch
# ---------------------------------------------------------------------------------------


def test_table_does_not_import_torch():
    code = ("import sys, taxcompile.cli as c; c.main(['table','specs/','--format','csv']); "
            "assert not any(m == 'torch' or m.startswith('torch.') for m in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Vaswani et al." in p.stdout


def test_table_does_not_import_torch_even_when_installed(tmp_path):
    """The same check with an importable (fake) torch on the path, so that it also
    means something where torch is not installed."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = 'fake'\n")
    code = ("import sys, torch; del sys.modules['torch']; "
            "import taxcompile.cli as c; c.main(['table','specs/','--format','csv']); "
            "assert not any(m == 'torch' or m.startswith('torch.') for m in sys.modules)")
    import os
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert "Vaswani et al." in p.stdout


# ---------------------------------------------------------------------------------------
# `table` keeps its rows in a cache (taxcompile/cache.py)
# ---------------------------------------------------------------------------------------

# never on the table path (networkx: checks and classify use taxcompile.digraph; the model
# graph of `graph`, `diagram` and codegen is a networkx.DiGraph, built when asked for;
# pydantic: the IR is frozen records, taxcompile/frozen.py)
HEAVY = ("torch", "jinja2", "matplotlib", "pygments", "networkx", "pydantic")
FRONT_END = ("lark", "taxcompile.parser", "taxcompile.lower",
             "taxcompile.checks", "taxcompile.classification")  # not needed when every row comes from the cache


def _table_modules(cache_dir: Path, *paths: str, no_cache: bool = False):
    """`taxcompile table PATHS` in a fresh interpreter: (exit code, stdout, the modules it
    imported)."""
    import os

    code = ("import sys, json, taxcompile.cli as c; r = c.main(['table', *sys.argv[1:]]); "
            "print(json.dumps([r, sorted(sys.modules)]), file=sys.stderr)")
    env = dict(os.environ, TAXCOMPILE_CACHE_DIR=str(cache_dir))
    env.pop("TAXCOMPILE_NO_CACHE", None)
    if no_cache:
        env["TAXCOMPILE_NO_CACHE"] = "1"
    p = subprocess.run([sys.executable, "-c", code, *paths], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, env=env)
    rc, modules = json.loads(p.stderr.splitlines()[-1])
    return rc, p.stdout, set(modules), p.stderr


def _imported(modules: set[str], names) -> list[str]:
    return sorted(m for m in modules for n in names if m == n or m.startswith(n + "."))


def test_table_import_set_cold_and_from_the_cache(tmp_path):
    """A cold `table` imports the front end but nothing of codegen, plots or highlighting;
    a table whose rows all come from the cache imports not even the front end, and prints
    the same bytes."""
    rc, cold, modules, _ = _table_modules(tmp_path, "specs/")
    assert rc == 0 and "Vaswani et al." in cold
    assert _imported(modules, HEAVY) == []
    assert "taxcompile.checks" in modules and "taxcompile.classification" in modules
    specs = list((ROOT / "specs").glob("*.attn"))
    assert len(list((tmp_path / "table").glob("*.json"))) == len(specs)
    rc, warm, modules, _ = _table_modules(tmp_path, "specs/")
    assert rc == 0 and warm == cold
    assert _imported(modules, HEAVY + FRONT_END) == []
    rc, off, modules, _ = _table_modules(tmp_path / "off", "specs/", no_cache=True)
    # no row written (lark's grammar tables are cached: they are code, not results)
    assert rc == 0 and off == cold and not (tmp_path / "off" / "table").exists()
    assert "taxcompile.checks" in modules


def test_table_cache_follows_the_spec(tmp_path):
    """An edited spec is classified again; a spec with errors reports them even after a
    good version of it was cached, and is never stored; a damaged entry is ignored."""
    spec = tmp_path / "luong2015.attn"
    text = (ROOT / LUONG).read_text(encoding="utf-8")
    spec.write_text(text, encoding="utf-8")
    cache_dir = tmp_path / "cache"
    rc, first, _, _ = _table_modules(cache_dir, str(spec), "--format", "csv")
    assert rc == 0 and ',"Multiplicative, Location",' in first
    spec.write_text(text.replace("score    = location", "score    = general"), encoding="utf-8")
    rc, edited, _, _ = _table_modules(cache_dir, str(spec), "--format", "csv")
    assert rc == 0 and ',"Multiplicative, General",' in edited, edited
    entries = sorted((cache_dir / "table").glob("*.json"))
    assert len(entries) == 2
    spec.write_text(text.replace("score    = location", "score    = nowhere"), encoding="utf-8")
    rc, out, _, err = _table_modules(cache_dir, str(spec))
    assert rc == 1 and "error: unknown score function `nowhere`" in err
    assert sorted((cache_dir / "table").glob("*.json")) == entries
    spec.write_text(text, encoding="utf-8")
    entries[0].write_text('{"row": {"paper": "damaged"', encoding="utf-8")
    entries[1].write_text('{"row": {"paper": "no other column"}, "survey_row": null}',
                          encoding="utf-8")
    rc, again, modules, _ = _table_modules(cache_dir, str(spec), "--format", "csv")
    assert rc == 0 and again == first and "taxcompile.checks" in modules


def test_table_cache_fingerprint_covers_the_front_end_sources(tmp_path, monkeypatch):
    from taxcompile import cache

    package = tmp_path / "taxcompile"
    (package / "grammar").mkdir(parents=True)
    (package / "checks.py").write_text("x = 1\n")
    (package / "grammar" / "attn.lark").write_text("start: NAME\n")
    (package / "mechanisms").mkdir()
    (package / "mechanisms" / "scores.py").write_text("READING = 'Additive'\n")
    monkeypatch.setattr(cache, "_PACKAGE", package)
    prints = []
    for path, text in ((None, None), (package / "checks.py", "x = 2\n"),
                       (package / "grammar" / "attn.lark", "start: NUMBER\n"),
                       (package / "mechanisms" / "scores.py", "READING = 'General'\n")):
        if path is not None:
            path.write_text(text)
        cache.fingerprint.cache_clear()
        prints.append(cache.fingerprint())
    cache.fingerprint.cache_clear()
    assert len(set(prints)) == 4  # the mechanism registry's records decide rows too


def test_table_dimensions_are_the_classifiers():
    from taxcompile import classification, table

    assert table.DIMENSIONS == classification.DIMENSIONS


def test_statement_keywords_name_constants_inputs_repeats_and_modules(tmp_path):
    spec = tmp_path / "kw.attn"
    spec.write_text(
        'paper toy { cite = "Toy" }\n'
        "let model = 64\n"
        "model global {\n"
        "    input let: tokens[S] (vocab = 100)\n"
        "    feature paper = embed(let, model)\n"
        "    repeat input 2 { update paper = norm(paper) }\n"
        "    attention attention { query = project(paper)  keys = paper  score = dot }\n"
        "    feature shared = norm(attention)\n"
        "}\n", encoding="utf-8")
    p = run("compile", str(spec), "-o", str(tmp_path / "out"))
    assert p.returncode == 0, p.stderr
    source = (tmp_path / "out" / "toy_global.py").read_text(encoding="utf-8")
    compile(source, "toy_global.py", "exec")
    assert "MultiplicativeAttention" in source


def test_table_cache_forgets_the_oldest_entries(tmp_path, monkeypatch):
    from taxcompile import cache

    monkeypatch.setenv("TAXCOMPILE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TAXCOMPILE_NO_CACHE", raising=False)
    monkeypatch.setattr(cache, "MAX_ENTRIES", 4)
    for i in range(5):
        cache.store(f"k{i}", {"row": {"paper": str(i)}, "survey_row": i})
        os.utime(tmp_path / "table" / f"k{i}.json", ns=(i * 10**9, i * 10**9))
    assert sorted(f.stem for f in (tmp_path / "table").iterdir()) == ["k3", "k4"]
    assert cache.load("k4", ("paper",)) == {"row": {"paper": "4"}, "survey_row": 4}
    assert cache.load("k4", ("paper", "ref")) is None


def test_front_end_import_leaves_the_collector_as_it_was(monkeypatch):
    """The command line imports the front end with the cyclic GC paused and freezes what
    the imports made; the collector is on again afterwards (and stays off if it was off)."""
    import gc

    from taxcompile import cli

    monkeypatch.setattr(cli, "_FRONT_END", False)  # make _front_end do its work again
    was = gc.isenabled()
    try:
        gc.enable()
        cli._front_end()
        assert gc.isenabled() and gc.get_freeze_count() > 0
        cli._FRONT_END = False
        gc.disable()
        cli._front_end()
        assert not gc.isenabled()
    finally:
        gc.unfreeze()
        (gc.enable if was else gc.disable)()
