"""`project(x)` without a width as the keys or values of a `kv_heads = g` module (issue 25):
the projection is g heads of the query heads' width, g·d_q/H, as a Config expression. The
model equals the one written with `let d_kv = kv_heads * d_model / heads` (weights copied,
outputs bit-equal), follows `Config(d_model = …)`, and a query the width cannot be read
from is a located error."""

from __future__ import annotations

import pytest

from conftest import ROOT, error_snapshot

torch = pytest.importorskip("torch")

from torch_support import build_model, one_thread  # noqa: E402, F401

GQA = (ROOT / "examples" / "gqa.attn").read_text(encoding="utf-8")
BARE = GQA.replace("project(x, d_kv)", "project(x)")


def build(text: str, name: str):
    return build_model(text, name, path="gqa.attn")


def test_bare_projections_are_the_kv_heads_width():
    assert BARE.count("project(x)") == 3 and "project(x, d_kv)" not in BARE
    explicit, bare = build(GQA, "kvw_explicit"), build(BARE, "kvw_bare")
    torch.manual_seed(0)
    cfg = explicit.Config.tiny()
    a = explicit.Model(cfg).eval()
    b = bare.Model(bare.Config.tiny()).eval()
    sd = a.state_dict()
    assert {k: v.shape for k, v in sd.items()} == {k: v.shape for k, v in b.state_dict().items()}
    b.load_state_dict(sd, strict=True)
    inputs = explicit.example_inputs(2, seed=0, cfg=cfg)
    torch.testing.assert_close(b(**inputs).output, a(**inputs).output, atol=0, rtol=0)


def test_the_width_follows_the_config():
    bare = build(BARE, "kvw_config")
    cfg = bare.Config(d_model=128, heads=8, kv_heads=2, vocab=50, d_ff=64, layers=1)
    model = bare.Model(cfg)
    widths = sorted(m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear)
                    and m.in_features == 128 and m.bias is None)
    assert widths == [128 + 2 * (2 * 128 // 8)]  # W_Q, W_K, W_V stacked: d + 2 g d / H
    ids = torch.randint(0, 50, (2, 7))
    assert model(ids).output.shape == (2, 7, 50)


def test_a_query_without_a_readable_width_is_a_located_error():
    got, want = error_snapshot("kv_heads_bare_project_query")
    assert got == want
