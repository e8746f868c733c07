"""The benchmark harness measures what it says (timing is not checked here: the targets
are checked by `python -m benchmarks`, on a quiet machine)."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from benchmarks import __main__ as bench  # noqa: E402
from benchmarks import cases, harness  # noqa: E402

KEYS = {"case", "candidate_s", "baseline_s", "ratio", "candidate_peak_bytes", "baseline_peak_bytes"}


def test_peak_bytes_sees_the_largest_live_set():
    def two_buffers():
        a = torch.empty(1 << 20)  # 4 MiB
        b = torch.empty(1 << 21)  # 8 MiB, while a is alive
        del a, b
        c = torch.empty(1 << 20)  # 4 MiB, after both are freed
        return c

    peak = harness.peak_bytes(two_buffers)
    assert 12 << 20 <= peak < 13 << 20


def test_alternate_returns_each_sides_median():
    calls = []
    c, b = harness.alternate(lambda: calls.append("c"), lambda: calls.append("b"), repeats=3, warmup=1)
    assert calls == ["c", "b"] * 4
    assert c >= 0 and b >= 0


def test_every_benchmark_spec_compiles():
    for spec, model in [("mha.attn", "mha"), ("dot.attn", "dot"), ("additive.attn", "additive"),
                        ("local.attn", "local"), ("local.attn", "full")]:
        mod = cases.build(spec, model)
        assert hasattr(mod, "Model") and hasattr(mod, "Config")


def test_the_broadcast_baseline_is_additive_attention():
    """NaiveAdditive against eq. 6 written out with loops."""
    torch.manual_seed(0)
    m = cases.NaiveAdditive(4, 3)
    q, k = torch.randn(2, 2, 4), torch.randn(2, 5, 4)
    out = m(q, k)
    for n in range(2):
        for i in range(2):
            e = torch.stack([m.w.weight[0] @ torch.tanh(m.W1.weight @ q[n, i] + m.W2.weight @ k[n, j]
                                                        + m.W2.bias) for j in range(5)])
            assert torch.allclose(out[n, i], e.softmax(0) @ k[n], atol=1e-6)


def test_json_rows_have_the_documented_fields(tmp_path, capsys):
    path = tmp_path / "bench.json"
    bench.main(["--quick", "--only", "dot_vs_gemm", "--json", str(path)])
    rows = json.loads(path.read_text())
    assert [r["case"] for r in rows] == ["dot_vs_gemm"]
    assert KEYS <= rows[0].keys()
    r = rows[0]
    assert math.isclose(r["ratio"], r["candidate_gflops"] / r["baseline_gflops"])
    assert "| `dot_vs_gemm` |" in capsys.readouterr().out
