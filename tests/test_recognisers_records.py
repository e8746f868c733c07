"""The generated code is the oracle of each recogniser: for every record of the registry
that names graph patterns (``Mechanism.recognised_by``), a small spec using that mechanism,
built from the record, is compiled with taxcompile's own codegen, built tiny, captured and
classified, and the reader must name exactly that record. A template and the pattern that
finds its code cannot drift apart: change one and this fails (as Inductor traces its
patterns from example functions). Capture costs seconds a model, so the suite checks the
mechanisms added as records alone (sigmoid attention, LightConv, differential attention) and
one score and alignment more; the nightly run (TAXCOMPILE_TORCHREAD_ALL=1) checks them all."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from taxcompile import api, combination_space as C, mechanisms as mech
from taxcompile.diagnostics import SpecError
from taxcompile.mechanism_names import example
from taxcompile.torchread import catalogue

ROOT = Path(__file__).resolve().parents[1]
ALL = os.environ.get("TAXCOMPILE_TORCHREAD_ALL") == "1"
SUITE = {("align", "sigmoid_attn"), ("align", "lightconv"), ("trait", "differential"),
         ("score", "none"), ("score", "additive"), ("align", "sparsemax")}
# Each model is read twice: asked for its weights (the template's `forward`: the weights as
# the mechanism defines them) and not (its fast path, where it has one).
PATHS = ("weights", "fast")
CONCAT = ("the concat score without a query, w^T W k, has no activation, and the pattern "
          "reads a learned vector over an activation")
EXPECTED_FAILURES = {  # (kind, name, path) -> why
    **{("score", "concat", p): CONCAT for p in PATHS},
}


def _combo(score: str, align: str, query_type: str = "basic",
           multiplicity: str = "singular") -> str:
    return C.spec_text(C.Combo(score, align, "single", query_type, multiplicity))


HEADER = 'paper probe {\n    cite = "Probe"\n    title = "probe"\n}\n\n'


def _own_weights(score, align) -> str:
    """A module whose alignment makes its own weights (its kernel), beside no score."""
    return (f"{HEADER}model m {{\n    input x: sequence[L, 6]\n    attention att {{\n"
            f"        query = x  features = x  score = {score.name}\n"
            f"        align = {example(align)}  heads = 2\n    }}\n"
            "    output out = identity(att)\n}\n")


def _co_attention(score) -> str:
    """Parallel co-attention over an affinity matrix (eq. 12-16), as combination_space's
    pairs write it, without their extras."""
    pair = next(p for p in C.pairs() if p.family == "parallel" and p.score == score.name
                and not p.share)
    text = C.pair_text(pair)
    return "\n".join(line for line in text.splitlines()
                     if not line.strip().startswith(("heads ", "dimensionality ", "capsules ")))


def _partner(rec, kind: str, cap: str):
    """The record of ``kind`` that the record's requirement ``cap`` names (a score without
    scores for an alignment with its own weights, and the other way round)."""
    return next(m for m in mech.REGISTRY.values() if m.kind == kind and cap in m.caps)


def _candidates(rec):
    """Specs that use ``rec``, in the order tried: the first the checker takes is used."""
    if rec.kind == "trait":  # a mechanism on a multi-head module's heads
        text = _combo("scaled_multiplicative", C.DEFAULT_ALIGN, multiplicity="multi_head")
        return [text.replace("    attention att {", f"    attention att {{\n        {rec.name} = true", 1)]
    if rec.kind == "score" and rec.needs_affinity:
        return [_co_attention(rec)]
    if "own_weights" in rec.caps:
        return [_own_weights(_partner(rec, "score", "no_score"), rec)]
    if "no_score" in rec.caps:
        return [_own_weights(rec, _partner(rec, "align", "own_weights"))]
    if rec.graph:
        return [open(ROOT / "examples" / "gat.attn").read()]
    if rec.kind == "align" and rec.shared_qk:  # LSH hashes q and k alike: one stream for both
        return [open(ROOT / "examples" / "kitaev2020_reformer.attn").read()]
    if rec.kind == "score":  # each query type, then the keys alone (eq. 33)
        texts = [_combo(rec.name, C.DEFAULT_ALIGN, q) for q in C.QUERY_TYPES]
        return texts + [_query(texts[0], None)]
    # the query another input, then the keys' own input (a gate per key position)
    texts = [_combo(s, rec.name) for s in ("scaled_multiplicative", "additive")]
    return texts + [_query(t, "x") for t in texts]


def _query(text: str, query: str | None) -> str:
    """``text`` with the module's query ``query`` (None: no query)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("query "))
    if query is None:
        del lines[at]
    else:
        lines[at] = lines[at].split("=")[0] + f"= {query}"
    return "\n".join(lines)


def spec_for(rec, path) -> None:
    """Write to ``path`` the first small spec using ``rec`` that the checker takes."""
    errors = []
    for text in _candidates(rec):
        path.write_text(text)
        try:
            api.load(str(path))
            return
        except SpecError as e:
            errors.append(str(e))
    raise AssertionError(f"no spec for {rec.kind} `{rec.name}` checks:\n" + "\n".join(errors))


def _cases():
    out = []
    for (kind, name), rec in mech.REGISTRY.items():
        for path in PATHS if rec.recognised_by else ():
            key = (kind, name, path)
            marks = [pytest.mark.xfail(strict=True, reason=EXPECTED_FAILURES[key])] \
                if key in EXPECTED_FAILURES else []
            if (kind, name) not in SUITE and not ALL:
                marks = [pytest.mark.skip(reason="the nightly run checks it "
                                          "(TAXCOMPILE_TORCHREAD_ALL=1)")]
            out.append(pytest.param(kind, name, path, id=f"{kind}:{name}:{path}", marks=marks))
    return out


def test_the_suite_holds_the_new_mechanisms():
    assert {("align", "sigmoid_attn"), ("align", "lightconv"), ("trait", "differential")} <= SUITE
    assert all(mech.REGISTRY[k].recognised_by for k in SUITE)


@pytest.mark.parametrize("kind,name,path", _cases())
def test_the_reader_names_the_record_its_own_code_came_from(kind, name, path, tmp_path):
    rec = mech.REGISTRY[(kind, name)]
    spec = tmp_path / "one.attn"
    spec_for(rec, spec)
    cs, _ = api.load(str(spec))
    mod = api.module(str(spec), cs.models[-1].model.name)
    cfg = api.config(mod, tiny=True)
    inputs = {k: v for k, v in mod.example_inputs(cfg=cfg).items() if not k.endswith("_mask")}
    if path == "weights":
        inputs["return_attention"] = True
    res = api.classify(mod.Model(cfg).eval(), inputs)
    named = [a.names.get(kind) for a in res.recognised]
    assert name in named, (f"{kind} `{name}` ({path}): its generated code reads as {named} "
                           f"(patterns {rec.recognised_by})\n{res.text()}")


def test_a_record_naming_an_unknown_pattern_is_refused():
    rec = mech.ALIGNS["global"]._replace(name="probe", recognised_by=("no_such_shape",))
    with pytest.raises(ValueError, match="align `probe` names 'no_such_shape'"):
        catalogue.check({("align", "probe"): rec, **mech.REGISTRY})


def test_two_alignments_naming_one_pattern_are_refused():
    rec = mech.ALIGNS["global"]._replace(name="probe")
    with pytest.raises(ValueError, match="align records .*probe all name"):
        catalogue.check({**mech.REGISTRY, ("align", "probe"): rec})


def test_the_registry_names_only_patterns_the_reader_has():
    catalogue.check()
