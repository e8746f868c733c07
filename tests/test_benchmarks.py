"""The benchmark harness measures what it says (timing is not checked here: the targets
are checked by `python -m benchmarks`, on a quiet machine)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from benchmarks import __main__ as bench  # noqa: E402
from benchmarks import cases, harness, peers  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
S = cases.Settings(repeats=1, local_lengths=(128, 256))  # CPU, fp32: tolerance 1e-4

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
                        ("local.attn", "local"), ("local.attn", "full"),
                        ("encoder.attn", "encoder"), ("local_mha.attn", "local"),
                        ("local_mha.attn", "full"), ("sparse.attn", "sparsemax"),
                        ("sparse.attn", "entmax")]:
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


# ---- the peers' equivalence checks, on tiny sizes: they pass, and they can fail -------------

TINY = dict(B=2, L=16, d=32, h=4, layers=2, d_ff=64)


def test_encoder_matches_nn_transformer_encoder_and_the_check_can_fail():
    pair = peers.encoder_nn_pair(S, **TINY)
    assert pair.check(S.tol)[0]
    peer = pair.modules[1]  # the nn.TransformerEncoder
    with torch.no_grad():
        peer.layers[1].linear1.weight[0, 0] += 1e-2
    ok, diff = pair.check(S.tol)
    assert not ok and diff > S.tol


def test_encoder_matches_x_transformers_and_the_check_can_fail():
    pytest.importorskip("x_transformers")
    pair = peers.encoder_xt_pair(S, **TINY)
    assert pair.check(S.tol)[0]
    peer = pair.modules[1]
    with torch.no_grad():
        peer.layers[0][0][2].gamma[3] += 1e-2  # the first post-attention norm
    assert not pair.check(S.tol)[0]


def test_local_block_matches_local_attention_and_the_check_can_fail():
    pytest.importorskip("local_attention")
    pair = peers.local_pair(S, B=1, L=192, d=64, h=2)  # 3 windows of 64
    ok, diff = pair.check(S.tol)
    assert ok, diff
    peer = pair.modules[1]
    peer.attn.exact_windowsize = False  # the package's default: up to 2 windows either side
    assert not pair.check(S.tol)[0]


@pytest.mark.parametrize("which", ["sparsemax", "entmax"])
def test_sparse_alignments_match_the_entmax_package_and_the_check_can_fail(which):
    pytest.importorskip("entmax")
    pair = peers.sparse_pair(S, which, shape=(2, 3, 5, 17))
    assert pair.check(S.tol)[0]
    e = pair.inputs[0]
    entmax = pytest.importorskip("entmax")
    other = entmax.entmax15 if which == "sparsemax" else entmax.sparsemax  # the wrong peer
    assert not peers.Pair(pair.ours, lambda: other(e, dim=-1), [e], pair.grad).check(S.tol)[0]


# ---- a missing peer is a skipped row with its reason, never an error --------------------------

@pytest.mark.parametrize("module, case", [
    ("x_transformers", peers.encoder_vs_xtransformers),
    ("local_attention", peers.local_vs_package),
    ("entmax", peers.sparsemax_vs_entmax),
    ("entmax", peers.entmax15_vs_entmax),
])
def test_a_missing_peer_gives_a_skipped_row(monkeypatch, module, case):
    monkeypatch.setitem(sys.modules, module, None)  # import module -> ImportError
    [r] = case(S)
    assert r["met"] is None and r["ratio"] is None and r["candidate_s"] is None
    assert f"peer `{module}` not installed" in r["skipped"]
    assert "skipped:" in bench.table([r])
    assert peers.local_single_head_peer(S) is None or module != "local_attention"


def test_graph_attention_row_checks_against_gatconv():
    """The row's pair (benchmarks/specs/gat_layer.attn, GATConv with our weights) agrees at a
    small size, and a changed weight on one side is caught (the check can fail)."""
    pytest.importorskip("torch_geometric")
    pair = peers.gat_pair(S, N=200, degree=5, heads=8, d=64)
    ok, diff = pair.check(1e-4)
    assert ok and diff < 1e-4
    with torch.no_grad():
        pair.modules[1].att_src.mul_(1.5)
    assert not pair.check(1e-4)[0]


def test_a_failed_equivalence_check_is_not_timed(monkeypatch):
    def make(s):
        x = torch.ones(3, requires_grad=True)
        return peers.Pair(lambda: x * 2, lambda: x * 3, [x], torch.ones(3))
    r = peers.compare("c", "ours", "peer", S, make)
    assert r["met"] is False and r["candidate_s"] is None and "**differ**" in r["equivalence"]


def test_case_modules_that_do_not_exist_are_left_out(monkeypatch):
    monkeypatch.setattr(cases, "CASE_MODULES", ("benchmarks.peers", "benchmarks.no_such_cases"))
    names = [c.__name__ for c in cases.all_cases()]
    assert names[:len(cases.CASES)] == [c.__name__ for c in cases.CASES]
    assert "encoder_vs_nn" in names


# ---- options: no matplotlib without --plot, --device cuda without CUDA, the plot itself --------

def test_no_matplotlib_unless_a_plot_is_asked_for():
    code = ("import sys\n"
            "from benchmarks import __main__ as m\n"
            "try:\n    m.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "m.main(['--quick', '--only', 'gat_vs_pyg'])\n"
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported'\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "gat_vs_gatconv" in out.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: --device cuda runs")
def test_device_cuda_without_cuda_skips_with_a_message(capsys):
    assert bench.main(["--device", "cuda", "--only", "dot_vs_gemm"]) == 0
    assert "CUDA is not available" in capsys.readouterr().out


def test_plot_writes_the_scaling_curves(tmp_path):
    pytest.importorskip("matplotlib")
    curve = {str(L): {"local_s": L * 1e-6, "global_s": L * L * 1e-9, "peer_s": L * 2e-6,
                      "local_peak_bytes": L * 1000, "global_peak_bytes": L * 2000,
                      "peer_peak_bytes": L * 3000} for L in (1024, 2048)}
    [path] = bench.plot([{"case": "local_scaling", "curve": curve}], tmp_path, "cpu fp32")
    assert path.name == "bench_local_scaling.png" and path.read_bytes()[:4] == b"\x89PNG"
