"""``taxcompile fmt`` and ``taxcompile new``.

Properties over every spec in ``specs/`` (read at test time): formatting keeps the IR
(modulo source locations), is idempotent and keeps every comment; the real specs are
already formatted. Then targeted printer cases, the CLI's behaviour on unformatted and
broken files, the starter spec, and a hypothesis test over mutated specs.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taxcompile.cli import main
from taxcompile.diagnostics import SpecError
from taxcompile.files import write_atomic
from taxcompile.fmt import format_text, starter
from taxcompile.parser import parse_text
from taxcompile.pipeline import load_text

ROOT = Path(__file__).resolve().parent.parent
SPEC_DIR = ROOT / "specs"


def spec_files() -> list[Path]:
    return sorted(SPEC_DIR.glob("*.attn"))


def _unlocated(obj):
    """An as_dict() without locations: every ``loc`` key dropped."""
    if isinstance(obj, dict):
        return {k: _unlocated(v) for k, v in obj.items() if k != "loc"}
    if isinstance(obj, (list, tuple)):
        return [_unlocated(v) for v in obj]
    return obj


def ir_of(text: str):
    return _unlocated(load_text(text, "t.attn").spec.as_dict())


def comments(text: str) -> Counter:
    """Comment texts, scanned independently of the formatter: `#` outside a string."""
    out: Counter = Counter()
    for line in text.split("\n"):
        in_str = esc = False
        for i, ch in enumerate(line):
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "#":
                out[line[i:].rstrip()] += 1
                break
    return out


def fmt(text: str) -> str:
    return format_text(text, "t.attn")


# ---- the real specs -------------------------------------------------------------------


def test_specs_exist():
    assert len(spec_files()) >= 18


@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.name)
def test_spec_round_trip_idempotent_comments(path: Path):
    text = path.read_text(encoding="utf-8")
    out = fmt(text)
    assert ir_of(out) == ir_of(text)
    assert fmt(out) == out
    assert comments(out) == comments(text)
    assert sum(comments(text).values()) > 0
    assert out.endswith("\n") and not out.endswith("\n\n")


def test_specs_are_formatted(capsys):
    assert main(["fmt", "--check", str(SPEC_DIR)]) == 0


# ---- the CLI --------------------------------------------------------------------------

UGLY = """\
# a spec   written   by hand
paper p { cite = "P et al."   year=2020 }   # the paper
let d=4  let dd = d*2
model m {
  input x : sequence[L,d] (L=5)
     feature h=linear(x,dd,act=tanh)
  attention a {features=h score=additive(d_w=d)}
  output y=classify(a,2)   # out
}
"""


def test_fmt_check_unformatted_then_fmt(tmp_path, capsys):
    f = tmp_path / "ugly.attn"
    f.write_text(UGLY, encoding="utf-8")
    assert main(["fmt", "--check", str(f)]) == 1
    err = capsys.readouterr().err
    assert str(f) in err and "not formatted" in err
    assert f.read_text(encoding="utf-8") == UGLY
    assert main(["fmt", str(f)]) == 0
    assert f"formatted {f}" in capsys.readouterr().out
    new = f.read_text(encoding="utf-8")
    assert new != UGLY and ir_of(new) == ir_of(UGLY) and comments(new) == comments(UGLY)
    assert main(["fmt", "--check", str(f)]) == 0
    assert main(["fmt", str(f)]) == 0  # nothing to do
    assert capsys.readouterr().out == ""
    assert [p.name for p in tmp_path.iterdir()] == ["ugly.attn"]  # no temp files left


def test_fmt_syntax_error_leaves_file(tmp_path, capsys):
    f = tmp_path / "bad.attn"
    text = "paper p { cite = \"x\" }\nmodel m {\n    feature x = f(a b)\n}\n"
    f.write_text(text, encoding="utf-8")
    assert main(["fmt", str(f)]) == 1
    err = capsys.readouterr().err
    assert f"{f}:3:" in err and "error" in err
    assert f.read_text(encoding="utf-8") == text


def test_fmt_missing_file(tmp_path, capsys):
    assert main(["fmt", str(tmp_path / "nope.attn")]) == 2


def test_write_atomic(tmp_path):
    f = tmp_path / "a.attn"
    write_atomic(f, "x\n")
    write_atomic(f, "y\n")
    assert f.read_text() == "y\n"
    assert [p.name for p in tmp_path.iterdir()] == ["a.attn"]
    with pytest.raises(TypeError):
        write_atomic(f, None)  # type: ignore[arg-type]
    assert f.read_text() == "y\n"
    assert [p.name for p in tmp_path.iterdir()] == ["a.attn"]


def test_new(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["new", "demo_spec"]) == 0
    f = tmp_path / "demo_spec.attn"
    text = f.read_text(encoding="utf-8")
    assert text == starter("demo_spec")
    assert "paper demo_spec {" in text and "docs/language.md" in text
    assert main(["check", str(f)]) == 0
    assert fmt(text) == text
    # refuses to overwrite without --force
    f.write_text("# mine\n", encoding="utf-8")
    assert main(["new", "demo_spec"]) == 2
    assert f.read_text(encoding="utf-8") == "# mine\n"
    assert main(["new", "demo_spec", "--force"]) == 0
    assert f.read_text(encoding="utf-8") == text
    # refuses bad names
    capsys.readouterr()
    assert main(["new", "class"]) == 2
    assert "class" in capsys.readouterr().err
    assert main(["new", "9lives"]) == 2
    assert not (tmp_path / "class.attn").exists()


@pytest.mark.parametrize("name", ["a", "smith2024", "x" * 64])
def test_starter_is_valid_and_canonical(name):
    text = starter(name)
    cs = load_text(text, f"{name}.attn")
    assert cs.spec.paper.id == name
    assert fmt(text) == text
    assert sum(comments(text).values()) >= 8


# ---- the printer ----------------------------------------------------------------------

PAPER = 'paper p { cite = "P" }\n'


def body(stmts: str) -> str:
    """Format a model body; return the body lines without the model's indentation."""
    out = fmt(f"model m {{\n{stmts}\n}}\n")
    lines = out.split("\n")
    assert lines[0] == "model m {" and lines[-2] == "}" and lines[-1] == ""
    return "\n".join(line[4:] for line in lines[1:-2])


@pytest.mark.parametrize("src, want", [
    ("(a + b) * c", "(a + b) * c"),
    ("a + b * c", "a + b * c"),
    ("(a + (b * c))", "a + b * c"),
    ("a - (b - c)", "a - (b - c)"),
    ("(a - b) - c", "a - b - c"),
    ("a / (b * c)", "a / (b * c)"),
    ("(a / b) * c", "a / b * c"),
    ("-3", "-3"),
    ("a - -3", "a - -3"),
    ("-(a + b)", "-(a + b)"),
    ("-a * b", "-a * b"),
    ("- (-a)", "-(-a)"),
    ("2.50", "2.50"),
    ("1e-3", "1e-3"),
    ("1E+4 * 007", "1E+4 * 007"),
])
def test_expressions(src, want):
    out = fmt(f"let x = {src}\n")
    assert out == f"let x = {want}\n"
    assert fmt(out) == out


def test_strings_keep_escapes():
    out = fmt(r'paper p { cite = "A \"B\" \\ C"  title = "x # not a comment" }' + "\n")
    assert out == ('paper p {\n    cite  = "A \\"B\\" \\\\ C"\n'
                   '    title = "x # not a comment"\n}\n')
    assert parse_text(out).items[0].fields[0].value.value == 'A "B" \\ C'


def test_calls_refs_inputs():
    assert body("input  src : tokens[ S ]( vocab=30000,autoregressive )") == \
        "input src: tokens[S] (vocab = 30000, autoregressive)"
    assert body("input x: vector[4]\ninput longer: vector[4]()") == \
        "input x:      vector[4]\ninput longer: vector[4]"
    assert body("output o=classify( concat(r[2].x ,r.y) ,k = 3)") == \
        "output o = classify(concat(r[2].x, r.y), k = 3)"


def test_one_line_attention_kept():
    src = "attention a {query=q keys=k score=general}"
    assert body(src) == "attention a { query = q  keys = k  score = general }"
    # written over several lines: one field per line, `=` aligned
    assert body("attention a { query = q\n keys = k }") == \
        "attention a {\n    query = q\n    keys  = k\n}"
    # too long for one line
    long = "attention a { query = q  keys = k  score = additive(d_w = " + "x" * 80 + ") }"
    assert body(long).split("\n")[0] == "attention a {"
    # adjacent one-line attentions with the same fields align in columns
    assert body("attention ab { query = q keys = kk }\nattention cd { query = qqq keys = k }") == \
        ("attention ab { query = q    keys = kk }\n"
         "attention cd { query = qqq  keys = k }")
    assert body("attention ab { query = q keys = kk }\nattention c { query = qqq keys = k }") == \
        ("attention ab { query = q  keys = kk }\n"
         "attention c { query = qqq  keys = k }")
    assert body("attention e { }") == "attention e {}"


def test_model_inheritance_and_repeat():
    out = fmt(PAPER + "model a { input x: vector[4] }\nmodel b:a{ repeat r 3 shared "
              "{ update x = norm(x) } }\n")
    assert out == ('paper p {\n    cite = "P"\n}\n\n'
                   "model a {\n    input x: vector[4]\n}\n\n"
                   "model b : a {\n    repeat r 3 shared {\n        update x = norm(x)\n"
                   "    }\n}\n")


def test_lets_aligned_and_blank_lines():
    src = "let a = 1\nlet bbb = 2\n\n\n\nlet c = 3\nmodel m {\n\n  let x = 1\n\n\n  let yy = 2\n  let z = 3\n\n}"
    assert fmt(src) == ("let a   = 1\nlet bbb = 2\n\nlet c = 3\n\nmodel m {\n"
                        "    let x = 1\n\n    let yy = 2\n    let z  = 3\n}\n")


COMMENTED = """\
# file header
paper p {  # header of paper
    # own line in paper
    cite = "P"  # trailing in paper
    # end of paper
}  # after paper
# before the lets
let a = 1  # on a
model m {  # header of model
    # before input
    input x: sequence[L, 4] (L = 3)  # on input
    feature f = linear(x,  # inside the call
        4)  # on feature
    attention one { features = f  score = additive }  # on one-line attention
    attention many {  # header of attention
        # before features
        features = f  # on features
        score    = additive
        # end of attention
    }  # after attention
    repeat r 2 shared {  # header of repeat
        # before update
        update f = norm(f)  # on update
        # end of repeat
    }  # after repeat
    output o = classify(many, 2)
    # end of model
}
# end of file
"""


def test_comments_in_every_kind_of_block():
    out = fmt(COMMENTED)
    assert comments(out) == comments(COMMENTED)
    assert fmt(out) == out
    assert ir_of(out) == ir_of(COMMENTED)
    lines = out.split("\n")

    def line_of(comment):
        return next(l for l in lines if comment in l)

    assert line_of("# file header") == "# file header"
    assert line_of("# header of paper") == "paper p {  # header of paper"
    assert line_of("# own line in paper") == "    # own line in paper"
    assert line_of("# trailing in paper") == '    cite = "P"  # trailing in paper'
    assert line_of("# end of paper") == "    # end of paper"
    assert line_of("# after paper") == "}  # after paper"
    assert line_of("# header of repeat") == "    repeat r 2 shared {  # header of repeat"
    assert line_of("# before update") == "        # before update"
    assert line_of("# on update") == "        update f = norm(f)  # on update"
    assert line_of("# end of repeat") == "        # end of repeat"
    assert line_of("# after repeat") == "    }  # after repeat"
    assert line_of("# end of model") == "    # end of model"
    assert line_of("# on features") == "        features = f  # on features"
    assert line_of("# header of attention") == "    attention many {  # header of attention"
    # a multi-line statement is joined; its first end-of-line comment moves above it
    i = lines.index("    # inside the call")
    assert lines[i + 1].startswith("    feature f = linear(x, 4)") and \
        lines[i + 1].endswith("# on feature")
    assert line_of("# on one-line attention").startswith(
        "    attention one { features = f  score = additive }")
    # own-line comments precede what follows them; the end of the file stays last
    assert lines.index("# before the lets") + 1 == lines.index(line_of("# on a"))
    assert lines[-2:] == ["# end of file", ""]
    assert lines[lines.index("    # end of model") + 1] == "}"


def test_trailing_comments_align():
    out = body("let a = 1  # one\nlet bbbb = 22 # two\nfeature f = g(a)\n\nlet c = 3   # three")
    assert out == ("let a    = 1   # one\nlet bbbb = 22  # two\nfeature f = g(a)\n\n"
                   "let c = 3  # three")


def test_comment_only_file_and_empty():
    assert fmt("") == ""
    assert fmt("  # only\n\n\n# comments   \n") == "# only\n\n# comments\n"


def test_crlf_and_bom():
    src = "\ufefflet a = 1 # c\r\nlet b = 2\r\n"
    assert fmt(src) == "let a = 1  # c\nlet b = 2\n"


def test_syntax_error_propagates():
    with pytest.raises(SpecError) as e:
        fmt("model m { feature x = }")
    assert e.value.diagnostics[0].loc.line == 1


# ---- mutated specs --------------------------------------------------------------------

_SNIPPETS = ["(", ")", "{", "}", "\n", "\n\n", " # c\n", "#", '"s"', "-", "+ 1", "* 2",
             ", ", "= ", "[1]", ".x", "let z = 3\n", "2.5", "shared", "model n : m {}\n"]


@st.composite
def mutated(draw):
    files = spec_files()
    text = files[draw(st.integers(0, len(files) - 1))].read_text(encoding="utf-8")
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "delete", "dup_line", "join_line"]))
        if kind == "insert":
            text = text[:i] + draw(st.sampled_from(_SNIPPETS)) + text[i:]
        elif kind == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 8)):]
        elif kind == "dup_line":
            a = text.rfind("\n", 0, i) + 1
            b = text.find("\n", i)
            b = len(text) if b < 0 else b + 1
            text = text[:b] + text[a:b] + text[b:]
        else:
            j = text.find("\n", i)
            if j >= 0:
                text = text[:j] + " " + text[j + 1:]
    return text


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated())
def test_mutated_specs(text):
    try:
        out = fmt(text)
    except SpecError as e:
        assert e.diagnostics
        return
    assert fmt(out) == out
    assert comments(out) == comments(text)
    try:
        before = ir_of(text)
    except SpecError:
        with pytest.raises(SpecError):
            ir_of(out)
        return
    assert ir_of(out) == before


def test_fmt_check_sees_crlf_and_empty_dir(tmp_path, capsys):
    f = tmp_path / "crlf.attn"
    f.write_bytes(b'paper p {\r\n    cite = "P"\r\n}\r\n')
    assert main(["fmt", "--check", str(f)]) == 1
    assert main(["fmt", str(f)]) == 0
    assert f.read_bytes() == b'paper p {\n    cite = "P"\n}\n'
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["fmt", str(empty)]) == 2
