"""Property tests of the front end (parse -> lower -> check -> classify).

1. Random mutations of the real specs in ``specs/`` never crash the front end:
   ``load_text`` either succeeds (and then the model classifies into eight
   non-empty cells) or raises a *located* ``SpecError``. Any other exception is
   a failure.
2. Randomly generated well-formed small specs either give a located
   ``SpecError`` or a classification whose scoring cell names the chosen scores
   and whose query multiplicity says Multi-Head exactly when some heads > 1.

The spec list is read from ``specs/`` when the module is collected (others add
specs there), and every test runs derandomized without an example database so
CI is reproducible.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from taxcompile import codegen, parser
from taxcompile.classification import DIMENSIONS
from taxcompile.diagnostics import SpecError, visible
from taxcompile.pipeline import classify_spec, load_text

ROOT = Path(__file__).resolve().parent.parent
SPEC_DIR = ROOT / "specs"


def _spec_files() -> list[Path]:
    return sorted(SPEC_DIR.glob("*.attn"))


SPECS: list[tuple[str, str]] = [(p.name, p.read_text(encoding="utf-8")) for p in _spec_files()]

COMMON = dict(deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                     HealthCheck.data_too_large])

# ---------------------------------------------------------------------------------------
# The oracle: succeed and classify, or fail with a located SpecError.
# ---------------------------------------------------------------------------------------


def n_lines(text: str) -> int:
    """Lines as an editor (and lark) counts them: newline-separated."""
    return text.count("\n") + 1


def assert_front_end_ok(text: str, file: str = "mutant.attn") -> str:
    """Run the front end on ``text``; return "ok" or "error". Raises AssertionError on
    a crash or an unlocated error (any non-SpecError exception propagates)."""
    try:
        cs = load_text(text, file)
    except SpecError as e:
        assert e.diagnostics, "SpecError without diagnostics"
        limit = max(n_lines(text), len(text.splitlines())) + 1
        located = [d for d in e.diagnostics
                   if 1 <= d.loc.line <= limit and d.loc.column >= 1]
        assert located, (f"no diagnostic located within 1..{limit}: "
                         f"{[(d.loc.line, d.loc.column, d.message) for d in e.diagnostics]}")
        for d in e.diagnostics:
            assert isinstance(d.message, str) and d.message.strip(), d
        rendered = e.render()
        assert "error:" in rendered, rendered
        assert str(e) == rendered
        if not any(c in text for c in LINE_BREAKS_OTHER_THAN_NL):
            assert_excerpts_match(e, text)
        return "error"
    row = classify_spec(cs).row()
    for dim in DIMENSIONS:
        assert dim in row, (dim, row)
        assert isinstance(row[dim], str) and row[dim].strip(), (dim, row)
    assert len([d for d in DIMENSIONS if row[d].strip()]) == 8
    for cm in cs.models:  # what check accepts, the generator compiles to valid Python
        compile(codegen.generate(cs, cm, file), file, "exec")
    return "ok"


# str.splitlines() also breaks lines at these; the parser counts only "\n". Texts with
# them are covered by test_excerpt_is_the_reported_line at the end of this file.
LINE_BREAKS_OTHER_THAN_NL = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def assert_excerpts_match(e: SpecError, text: str) -> None:
    """Each diagnostic points inside the text, and its rendered excerpt is the source
    line it names (the caret under the column)."""
    lines = text.split("\n")
    if text.startswith("\ufeff"):  # the reader drops a byte-order mark
        lines[0] = lines[0][1:]
    for d in e.diagnostics:
        assert d.loc.line <= len(lines), (d, len(lines))
        line = lines[d.loc.line - 1]
        assert d.loc.column <= len(line) + 1, (d, line)
        out = d.render(text).split("\n")
        if len(line) <= 200 and len(out) >= 3 and out[1].startswith("    "):
            # a control character is shown escaped (`\x1b`), the caret moved with it
            assert out[1] == "    " + visible(line.replace("\t", " ")), (d, out[1], line)
            col = len(visible(line[:d.loc.column - 1])) + 1
            assert out[2] == "    " + " " * (col - 1) + "^", (d, out[2])


def test_real_specs_are_valid():
    """Sanity: the unmutated specs load and classify (so mutants start from valid text)."""
    assert SPECS, "no specs found in specs/"
    for name, text in SPECS:
        assert assert_front_end_ok(text, name) == "ok", name


# ---------------------------------------------------------------------------------------
# Mutation strategies
# ---------------------------------------------------------------------------------------

LANG_ALPHABET = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
                 "{}()[]=,:.+-*/#\" \n\t")
ODD_CHARS = ["\x00", "\ufeff", "\u2028", "\u2029", "\r", "\r\n", "\x0b", "\x0c", "\x1c",
             "\x85", "\u200b", "\u00a0", "\U0001f600", "\\", "'", "`", "\t", "é", "λ",
             "\uffff", "\U0010ffff", "\u0301", "@", "$", ";", "!", "?", "|", "&", "<", ">"]

# Arbitrary unicode, surrogates excluded (they cannot be encoded to UTF-8).
any_char = st.characters(exclude_categories=("Cs",))
lang_char = st.sampled_from(LANG_ALPHABET)
insert_text = st.one_of(
    st.text(lang_char, min_size=1, max_size=8),
    st.text(any_char, min_size=1, max_size=4),
    st.lists(st.sampled_from(ODD_CHARS), min_size=1, max_size=3).map("".join),
)

IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NUMBER_RE = re.compile(r"(?<![A-Za-z0-9_.])[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
SCORE_NAMES = ("additive", "concat", "multiplicative", "scaled_multiplicative", "general",
               "biased_general", "activated_general", "similarity", "location",
               "max_pool", "affinity")
ALIGN_NAMES = ("global", "soft", "hard", "local", "reinforced", "sparsemax", "entmax")
KEYWORD_RE = re.compile(r"\b(" + "|".join(SCORE_NAMES + ALIGN_NAMES) + r")\b")
DUNDERS = ("__init__", "__class__", "__dict__", "__import__", "__builtins__", "__proto__",
           "__x", "__")
REPLACEMENT_NUMBERS = ("0", "-1", str(10**9), "2.5")
random_word = st.one_of(
    st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,10}\Z"),
    st.text(lang_char, min_size=0, max_size=6),
    st.sampled_from(SCORE_NAMES + ALIGN_NAMES + tuple(keyword.kwlist)),
)


def _pos(draw, text: str) -> int:
    return draw(st.integers(0, len(text)))


def m_delete_range(draw, text: str) -> str:
    if not text:
        return text
    i = _pos(draw, text)
    j = draw(st.integers(i, min(len(text), i + 40)))
    return text[:i] + text[j:]


def m_insert(draw, text: str) -> str:
    i = _pos(draw, text)
    return text[:i] + draw(insert_text) + text[i:]


def _lines(text: str) -> list[str]:
    return text.split("\n")


def m_duplicate_line(draw, text: str) -> str:
    lines = _lines(text)
    i = draw(st.integers(0, len(lines) - 1))
    lines.insert(i, lines[i])
    return "\n".join(lines)


def m_delete_line(draw, text: str) -> str:
    lines = _lines(text)
    del lines[draw(st.integers(0, len(lines) - 1))]
    return "\n".join(lines)


def m_swap_lines(draw, text: str) -> str:
    lines = _lines(text)
    i = draw(st.integers(0, len(lines) - 1))
    j = draw(st.integers(0, len(lines) - 1))
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _replace_match(draw, text: str, regex: re.Pattern, replacement: st.SearchStrategy) -> str:
    matches = list(regex.finditer(text))
    if not matches:
        return text
    m = draw(st.sampled_from(matches))
    return text[:m.start()] + draw(replacement) + text[m.end():]


def m_replace_number(draw, text: str) -> str:
    return _replace_match(draw, text, NUMBER_RE, st.sampled_from(REPLACEMENT_NUMBERS))


def m_replace_identifier(draw, text: str) -> str:
    idents = sorted(set(IDENT_RE.findall(text))) or ["x"]
    repl = st.one_of(st.sampled_from(idents), st.sampled_from(keyword.kwlist),
                     st.sampled_from(DUNDERS))
    return _replace_match(draw, text, IDENT_RE, repl)


def m_replace_keyword(draw, text: str) -> str:
    return _replace_match(draw, text, KEYWORD_RE, random_word)


def m_truncate(draw, text: str) -> str:
    return text[:_pos(draw, text)]


# The grammar's keywords (`model`, `output`, …), read from the grammar itself.
GRAMMAR_KEYWORDS = tuple(sorted(parser._keywords().values()))
GLUE_RE = re.compile(r"\b(" + "|".join(GRAMMAR_KEYWORDS) + r")(\s+)[A-Za-z_]")
# A keyword that starts a statement (first on its line) and the name after it.
STATEMENT_GLUE_RE = re.compile(r"^[ \t]*(" + "|".join(GRAMMAR_KEYWORDS) + r")([ \t]+)"
                               r"[A-Za-z_]", re.M)


def glue(text: str, m: re.Match) -> str:
    """``text`` with the white space after the keyword of ``m`` removed."""
    return text[:m.start(2)] + text[m.end(2):]


def m_glue_keyword(draw, text: str) -> str:
    """A keyword glued to the word after it (`output s = …` -> `outputs = …`)."""
    matches = list(GLUE_RE.finditer(text))
    return glue(text, draw(st.sampled_from(matches))) if matches else text


MUTATIONS = {f.__name__[2:]: f for f in (
    m_delete_range, m_insert, m_duplicate_line, m_delete_line, m_swap_lines,
    m_replace_number, m_replace_identifier, m_replace_keyword, m_truncate, m_glue_keyword)}


@st.composite
def mutants(draw, ops=tuple(MUTATIONS), min_ops=1, max_ops=4):
    name, text = draw(st.sampled_from(SPECS))
    for _ in range(draw(st.integers(min_ops, max_ops))):
        op = draw(st.sampled_from(ops))
        text = MUTATIONS[op](draw, text)
    return name, text


# ---------------------------------------------------------------------------------------
# Mutation properties
# ---------------------------------------------------------------------------------------


@settings(max_examples=150, **COMMON)  # `make fuzz` runs the spec property's long profile
@given(mutants())
def test_composed_mutations_never_crash(case):
    name, text = case
    event(assert_front_end_ok(text, "mutant_" + name))


# One property per mutation kind, so a failure names the kind and each gets examples.
@pytest.mark.parametrize("op", sorted(MUTATIONS))
@settings(max_examples=25, **COMMON)  # per operation: the composed test mixes them
@given(data=st.data())
def test_single_mutation_never_crashes(op, data):
    name, text = data.draw(mutants(ops=(op,), min_ops=1, max_ops=2))
    event(assert_front_end_ok(text, "mutant_" + name))


@settings(max_examples=120, **COMMON)
@given(mutants(ops=("replace_identifier", "replace_number", "replace_keyword"),
               min_ops=1, max_ops=3))
def test_semantic_mutations_never_crash(case):
    """Token-level mutations mostly keep the syntax valid, so they reach the lowering,
    checks and classification stages."""
    name, text = case
    event(assert_front_end_ok(text, "mutant_" + name))


def test_a_glued_statement_keyword_in_each_spec_is_refused_where_it_stands():
    """Every statement of every spec, its keyword glued to its name (`outputs = …`,
    `modelm {`): refused with a located "expected …; found `outputs`", never read as the
    keyword and a shorter name."""
    cases = 0
    for name, text in SPECS:
        for m in STATEMENT_GLUE_RE.finditer(text):
            mutant = glue(text, m)
            word = IDENT_RE.match(mutant, m.start(1)).group()
            line = text.count("\n", 0, m.start(1)) + 1
            column = m.start(1) - (text.rfind("\n", 0, m.start(1)) + 1) + 1
            with pytest.raises(SpecError) as info:
                load_text(mutant, name)
            first = info.value.diagnostics[0]
            assert (first.loc.line, first.loc.column) == (line, column), (name, line, word)
            assert first.message.startswith("expected"), (name, line, first.message)
            assert first.message.endswith(f"; found `{word}`"), (name, line, first.message)
            cases += 1
    assert cases > 100


# Targeted reproducers (examples, not properties) for the odd characters.
# Each character goes into every spec at one of three places (start, middle, end), the
# place turning with the spec and the character, so every character meets every place in
# several specs (all three places in every spec took a minute and a half of the suite).
@pytest.mark.parametrize("ch", ODD_CHARS + ["\x00\x00", "\ud7ff", "\ue000"])
def test_odd_character_inserted_into_each_spec(ch):
    turn = sum(map(ord, ch))
    for k, (name, text) in enumerate(SPECS):
        i = (0, len(text) // 2, len(text))[(k + turn) % 3]
        assert_front_end_ok(text[:i] + ch + text[i:], name)


# ---------------------------------------------------------------------------------------
# Generated well-formed small specs
# ---------------------------------------------------------------------------------------

D = 64
SCORE_SRC = {
    "additive": st.sampled_from(["additive(d_w = 32, act = tanh)", "additive(d_w = 16)",
                                 "additive(d_w = 32, act = relu, bias = false)"]),
    "concat": st.just("concat(d_w = 32)"),
    "multiplicative": st.just("multiplicative"),
    "scaled_multiplicative": st.just("scaled_multiplicative"),
    "general": st.just("general"),
    "biased_general": st.just("biased_general"),
    "activated_general": st.sampled_from(["activated_general", "activated_general(act = tanh)",
                                          "activated_general(act = relu)"]),
    "similarity": st.sampled_from(["similarity(kind = cosine)", "similarity(kind = l2)"]),
    "location": st.just("location"),
}
SCORE_LABEL = {"additive": "Additive", "concat": "Additive", "multiplicative": "Multiplicative",
               "scaled_multiplicative": "Scaled Multiplicative", "general": "General",
               "biased_general": "Biased General", "activated_general": "Activated General",
               "similarity": "Similarity", "location": "Location"}
ALIGN_SRC = st.sampled_from(["global", "soft", "hard", "reinforced", "sparsemax", "entmax",
                             "local(D = 3, position = monotonic)",
                             "local(D = 2, position = predictive, gaussian = true, sigma = 1)"])


def build_spec(inputs: list[str], features: list[tuple[str, str]],
               atts: list[dict]) -> str:
    """Assemble spec text from already chosen parts (a plain function, so a fixed spec
    can be built by hand in tests too)."""
    out = ['paper gen {', '    cite = "Generated et al."', '    ref = 99', '}', '',
           f'let d = {D}', '', 'model m {']
    out += ["    " + s for s in inputs]
    out += [f"    feature {n} = {e}" for n, e in features]
    for a in atts:
        out.append(f"    attention {a['name']} {{")
        for k in ("query", "features", "keys", "values", "score", "align", "heads",
                  "dimensionality", "mask"):
            if a.get(k) is not None:
                out.append(f"        {k} = {a[k]}")
        out.append("    }")
    for a in atts:  # one output layer per module (contexts may differ in shape)
        out.append(f"    output o_{a['name']} = classify({a['name']}, 3)")
    out.append("}")
    return "\n".join(out) + "\n"


INPUT_KINDS = {
    "tokens": lambda i: (f"input in{i}: tokens[S{i}] (vocab = 100, S{i} = 12)",
                         f"embed(in{i}, d)"),
    "tokens_ar": lambda i: (f"input in{i}: tokens[T{i}] (vocab = 100, autoregressive)",
                            f"gru(embed(in{i}, d), d)"),
    "sequence": lambda i: (f"input in{i}: sequence[L{i}, 32] (L{i} = 7)",
                           f"linear(in{i}, d, act = tanh)"),
    "set": lambda i: (f"input in{i}: set[N{i}, 16] (N{i} = 5)", f"project(in{i}, d)"),
}
FEATURE_WRAP = st.sampled_from(["{}", "norm({})", "bilstm({}, 32)", "bigru({}, 32)",
                                "cnn({}, d, kernel = 3)", "positional({}, kind = learned)",
                                "relu({})", "linear({}, d)", "identity({})", "ffn({}, 128)"])


@st.composite
def generated_specs(draw):
    n_in = draw(st.integers(1, 3))
    inputs, features = [], []
    for i in range(n_in):
        decl, base = INPUT_KINDS[draw(st.sampled_from(sorted(INPUT_KINDS)))](i)
        inputs.append(decl)
        features.append((f"f{i}", draw(FEATURE_WRAP).format(base)))
    # a few extra feature models built from the first ones
    for j in range(draw(st.integers(0, 2))):
        src = draw(st.sampled_from([n for n, _ in features]))
        features.append((f"g{j}", draw(FEATURE_WRAP).format(src)))
    feat_names = [n for n, _ in features]
    atts = []
    for k in range(draw(st.integers(1, 3))):
        score_fn = draw(st.sampled_from(sorted(SCORE_SRC)))
        a = {"name": f"a{k}", "score_fn": score_fn, "score": draw(SCORE_SRC[score_fn])}
        prev = [x["name"] for x in atts]
        # No query and multi-dimensional scores need an additive score (docs); other
        # choices are drawn rarely so that most generated specs are valid.
        additive = score_fn in ("additive", "concat")
        a["query"] = draw(st.one_of(
            st.none() if additive or draw(st.integers(0, 9)) == 0 else st.just("learned(d)"),
            st.just("learned(d)"), st.sampled_from(feat_names),
            st.sampled_from(feat_names).map(lambda n: f"mean({n})"),
            st.sampled_from(feat_names).map(lambda n: f"project({n})"),
            *([st.sampled_from(prev).map(lambda n: f"mean({n})")] if prev else [])))
        target = draw(st.sampled_from(feat_names))
        if draw(st.booleans()):
            a["features"] = target
        else:
            a["keys"] = f"project({target})"
            a["values"] = draw(st.sampled_from([target, f"project({target})"]))
        if draw(st.booleans()):
            a["align"] = draw(ALIGN_SRC)
        a["heads"] = draw(st.sampled_from([None, 1, 2, 4, 8, None, 1, 2, 4, 8, 3]))
        a["dimensionality"] = draw(st.sampled_from(
            [None, "single"] + (["multi"] if additive or draw(st.integers(0, 9)) == 0 else [])))
        atts.append(a)
    return build_spec(inputs, features, atts), atts


@settings(max_examples=250, **COMMON)
@given(generated_specs())
def test_generated_specs_classify_consistently(case):
    text, atts = case
    try:
        cs = load_text(text, "gen.attn")
    except SpecError:
        assert_front_end_ok(text, "gen.attn")  # located, rendered
        event("error")
        return
    event("ok")
    row = classify_spec(cs).row()
    for dim in DIMENSIONS:
        assert row[dim].strip(), (dim, row, text)
    scoring = row["scoring"].split(" + ")
    for a in atts:
        assert SCORE_LABEL[a["score_fn"]] in scoring, (a["score_fn"], row["scoring"], text)
    assert set(scoring) <= set(SCORE_LABEL.values()), row["scoring"]
    multi_head = any((a["heads"] or 1) > 1 for a in atts)
    assert ("Multi-Head" in row["query_multiplicity"].split(" + ")) == multi_head, \
        (row["query_multiplicity"], [a["heads"] for a in atts], text)


def test_generated_builder_makes_a_valid_spec():
    """The generator is not vacuous: a hand-picked combination loads and classifies."""
    text = build_spec(
        [INPUT_KINDS["tokens"](0)[0], INPUT_KINDS["sequence"](1)[0]],
        [("f0", "embed(in0, d)"), ("f1", "linear(in1, d, act = tanh)")],
        [{"name": "a0", "query": "learned(d)", "features": "f0",
          "score": "additive(d_w = 32, act = tanh)", "heads": 4},
         {"name": "a1", "query": "mean(f0)", "keys": "project(f1)", "values": "f1",
          "score": "scaled_multiplicative", "align": "hard"}])
    row = classify_spec(load_text(text, "gen.attn")).row()
    assert row["scoring"] == "Additive + Scaled Multiplicative", row
    assert "Multi-Head" in row["query_multiplicity"], row


# ---------------------------------------------------------------------------------------
# Excerpts under a diagnostic come from the line it reports, whatever the line breaks
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("where, sep", [
    ("whitespace", "\x0c"),   # a form feed is whitespace in the grammar (%ignore WS)
    ("comment", "\u2028"),    # any character is allowed in a comment
    ("comment", "\x85"),
])
def test_excerpt_is_the_reported_line(where, sep):
    text = dict(SPECS).get("bahdanau2015.attn")
    if text is None:
        pytest.skip("specs/bahdanau2015.attn is gone")
    text = text.replace("features = h", "features = nowhere")
    if where == "whitespace":
        text = text.replace("let vocab  = 30000", "let vocab  = 30000 " + sep, 1)
    else:
        text = "# a" + sep + "b\n" + text
    with pytest.raises(SpecError) as info:
        load_text(text, "b.attn")
    if sep in ("\x0c", "\x85"):  # control characters: refused where they are (issue 23)
        (d,) = info.value.diagnostics
        line = text.split("\n")[d.loc.line - 1]
        assert line[d.loc.column - 1] == sep and f"U+{ord(sep):04X}" in d.message
        assert sep not in d.render(text) and visible(sep) in d.render(text)
        return
    d = next(d for d in info.value.diagnostics if "nowhere" in d.message)
    assert text.split("\n")[d.loc.line - 1].strip() == "features = nowhere"  # line is right
    excerpt = d.render(text).split("\n")[1]
    assert "features = nowhere" in excerpt, d.render(text)


@settings(max_examples=100, **COMMON)
@given(generated_specs())
def test_generated_specs_compile_and_run(case):
    """Whatever `check` accepts compiles to Python that runs forward and backward."""
    torch = pytest.importorskip("torch")
    from taxcompile.run import load_module

    text, _ = case
    try:
        cs = load_text(text, "gen.attn")
    except SpecError:
        event("refused")
        return
    event("compiled")
    for cm in cs.models:
        src = codegen.generate(cs, cm, "gen.attn")
        compile(src, "gen.py", "exec")  # valid Python
        mod = load_module(src, "gen_model")
        cfg = mod.Config.tiny()
        model = mod.Model(cfg)
        out = model(**mod.example_inputs(cfg=cfg))
        outs = out.output.values() if isinstance(out.output, dict) else [out.output]
        loss = sum(o.float().mean() for o in outs) + getattr(out, "penalty", 0.0) \
            - sum(lp.sum() for lp in getattr(out, "log_probs", {}).values())
        assert torch.isfinite(loss), text
        loss.backward()
