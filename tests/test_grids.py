"""Grids and attention gates: ``conv2d``, ``maxpool`` and ``upsample`` over the two axes of a
``grid`` feature, the sigmoid alignment (Oktay et al.'s attention gate), and the attention
U-Net built from them (specs/oktay2018.attn).

The references are written here: torch's functional ops on (B, C, H, W) images with the
padding worked out by hand, block maxima and repeats for pooling and nearest upsampling,
and Oktay et al.'s gate, alpha_i = sigmoid(psi^T relu(W_x^T x_i + W_g^T g_i + b_g) + b_psi),
x^_i = alpha_i x_i, pixel by pixel.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, classify_text
from taxcompile import pipeline
from taxcompile.diagnostics import SpecError

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torch_support import inline_builder  # noqa: E402

# conv2d(kernel = 2) with padding="same": torch warns, harmlessly
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")

DATA = Path(__file__).resolve().parent / "data" / "errors"
UPDATE = os.environ.get("TAXCOMPILE_UPDATE_SNAPSHOTS") == "1"
HEADER = 'paper grids {\n    cite = "Grids"\n}\n'


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    return inline_builder(tmp_path_factory.mktemp("grids"), HEADER, "_taxcompile_grids")


def build(gen, body: str, **cfg):
    """Model(Config(**cfg)) of ``body``, every parameter random (a zero bias hides bugs)."""
    mod = gen(body)
    torch.manual_seed(0)
    model = mod.Model(mod.Config(**cfg))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return mod, model


def images(x):  # (B, H, W, C) -> (B, C, H, W)
    return x.permute(0, 3, 1, 2)


def grid(y):  # (B, C, H, W) -> (B, H, W, C)
    return y.permute(0, 2, 3, 1)


# A trivial gate keeps each model an attention model; the output is the op under test.
GATE = "attention a { keys = image  score = additive(d_w = 2)  align = sigmoid }"


def op_model(expr: str, H: int = 8, W: int = 12) -> str:
    return (f"model m {{\n    input image: grid[H, W, 3] (H = {H}, W = {W})\n"
            f"    {GATE}\n    output y = {expr}\n}}\n")


# ---- the operators against torch references -------------------------------------------------


@pytest.mark.parametrize("kernel,stride", [(3, 1), (2, 1), (3, 2), (2, 2), (5, 2), (1, 4)])
def test_conv2d_is_a_2d_convolution_over_h_and_w(gen, kernel, stride):
    mod, model = build(gen, op_model(f"conv2d(image, 5, kernel = {kernel}, stride = {stride}, "
                                     "act = none)"))
    x = mod.example_inputs(2)["image"]
    w, b = model.y_conv.weight, model.y_conv.bias
    if stride == 1:  # "same": (k - 1) // 2 before, the rest after
        lo = (kernel - 1) // 2
        ref = F.conv2d(F.pad(images(x), (lo, kernel - 1 - lo, lo, kernel - 1 - lo)), w, b)
    else:  # H / s outputs: windows start at s * i - p with p = max(0, ceil((k - s) / 2))
        p = max(0, -(-(kernel - stride) // 2))
        ref = F.conv2d(images(x), w, b, stride=stride, padding=p)
    ref = grid(ref)
    assert ref.shape == (2, 8 // stride, 12 // stride, 5)
    torch.testing.assert_close(model(**{"image": x}).output, ref)


def test_config_refuses_an_axis_that_is_not_a_multiple_of_its_down_sampling(gen):
    """Issue 24: Config(H=18, W=16) of a patch-4 model ran and dropped two pixel rows (a
    stride-4 convolution over 18 rows gives 4 patch rows, 16 of the 18 pixels)."""
    mod = gen(op_model("conv2d(image, 5, kernel = 4, stride = 4)", 16, 16))
    assert "a multiple of 4" in Path(mod.__file__).read_text(encoding="utf-8")
    with pytest.raises(ValueError, match=r"Config\.H = 18: must be a positive multiple of 4"):
        mod.Config(H=18, W=16)
    with pytest.raises(ValueError, match=r"Config\.W = 0: must be a positive multiple of 4"):
        mod.Config(W=0)
    y = mod.Model(mod.Config(H=20, W=8))(image=torch.randn(1, 20, 8, 3)).output
    assert y.shape == (1, 5, 2, 5)  # a multiple: every pixel in a patch


def test_conv2d_applies_its_activation(gen):
    mod, model = build(gen, op_model("conv2d(image, 4)"))
    x = mod.example_inputs(2)["image"]
    ref = grid(F.relu(F.conv2d(images(x), model.y_conv.weight, model.y_conv.bias, padding=1)))
    torch.testing.assert_close(model(image=x).output, ref)


def test_maxpool_takes_block_maxima(gen):
    mod, model = build(gen, op_model("maxpool(image, 2)", 8, 12))
    x = mod.example_inputs(2)["image"]
    ref = x.view(2, 4, 2, 6, 2, 3).amax((2, 4))  # the maximum of each 2 x 2 block
    torch.testing.assert_close(model(image=x).output, ref)


def test_upsample_nearest_repeats_and_bilinear_interpolates(gen):
    mod, model = build(gen, op_model("upsample(image, 2, mode = nearest)", 4, 6))
    x = mod.example_inputs(2)["image"]
    ref = x.repeat_interleave(2, 1).repeat_interleave(2, 2)
    torch.testing.assert_close(model(image=x).output, ref)
    mod, model = build(gen, op_model("upsample(image, 2)", 4, 6))
    ref = grid(F.interpolate(images(x), size=(8, 12), mode="bilinear", align_corners=False))
    torch.testing.assert_close(model(image=x).output, ref)


def test_down_and_up_sampling_name_and_size_the_axes():
    text = HEADER + op_model("upsample(maxpool(conv2d(image, 4, stride = 2), 2), 4)", 8, 16) \
        .replace("output y =", "feature p = maxpool(image, 4)\n    output y =")
    cm = pipeline.load_text(text, "t.attn").models[0]
    assert cm.shapes["p"].axes == ("H/4", "W/4") and cm.shapes["y"].axes == ("H", "W")
    assert (cm.sizes["H/4"], cm.sizes["W/4"], cm.sizes["H/2"]) == (2, 4, 4)
    assert cm.shapes["y"].dim == 4


# ---- the sigmoid alignment: Oktay et al.'s attention gate --------------------------------------


def oktay_gate(x, g, W_x, W_g, b_g, psi, b_psi):
    """alpha_i = sigmoid(psi^T relu(W_x^T x_i + W_g^T g_i + b_g) + b_psi), x^_i = alpha_i x_i,
    for every pixel i of x (B, H, W, F_l); g: (B, H, W, F_g) or a single vector (B, F_g).
    psi: (F_int,) gives one coefficient per pixel, (F_int, F_l) one per feature."""
    B, H, W, _ = x.shape
    alpha = torch.empty(B, H, W, *psi.shape[1:])
    for b in range(B):
        for i in range(H):
            for j in range(W):
                gi = g[b] if g.dim() == 2 else g[b, i, j]
                h = torch.relu(x[b, i, j] @ W_x + gi @ W_g + b_g)
                alpha[b, i, j] = torch.sigmoid(h @ psi + b_psi)
    return (alpha.unsqueeze(-1) if psi.dim() == 1 else alpha) * x, alpha


GATE_MODEL = """model m {{
    input image: grid[H, W, 3] (H = 4, W = 6)
    input cue: grid[H, W, 5] (H = 4, W = 6)
    attention gate {{
        {query}
        keys  = image
        score = additive(d_w = 7, act = relu)
        align = sigmoid
        dimensionality = {dims}
    }}
}}
"""


@pytest.mark.parametrize("dims", ["single", "multi"])
@pytest.mark.parametrize("query", ["grid", "vector"])
def test_the_gate_is_oktays_equation(gen, dims, query):
    q = "query = cue" if query == "grid" else "query = learned(5)"
    mod, model = build(gen, GATE_MODEL.format(query=q, dims=dims))
    ex = mod.example_inputs(2)
    out = model(**ex, return_attention=True)
    att = model.gate
    g = ex["cue"] if query == "grid" else model.gate_q.detach().expand(2, -1)
    psi = att.w[0]  # (F_int,) or (F_int, F_l)
    b_psi = att.b_psi.view(-1) if dims == "multi" else att.b_psi.view(())
    want, alpha = oktay_gate(ex["image"], g, att.W2[0], att.W1[0], att.b[0], psi, b_psi)
    torch.testing.assert_close(out.output, want.detach())
    # the weights: the gate of every pixel, (B, H rows, heads, 1, W, [F_l])
    a = out.attention["gate"]
    assert a.shape == (2, 4, 1, 1, 6) + ((3,) if dims == "multi" else ())
    torch.testing.assert_close(a[:, :, 0, 0], alpha.detach())


@pytest.mark.parametrize("dims", ["single", "multi"])
def test_a_two_head_gate_gates_each_slice_then_joins_them(gen, dims):
    body = GATE_MODEL.format(query="query = cue", dims=dims).replace(
        "grid[H, W, 3]", "grid[H, W, 4]").replace("grid[H, W, 5]", "grid[H, W, 4]").replace(
        "align = sigmoid", "align = sigmoid\n        heads = 2")
    mod, model = build(gen, body)
    ex = mod.example_inputs(2)
    att = model.gate
    parts = []
    for j in range(2):  # head j reads slice j of x and g (eq. 38) with its own W_x, W_g, psi
        x, g = ex["image"][..., 2 * j:2 * j + 2], ex["cue"][..., 2 * j:2 * j + 2]
        h = torch.relu(x @ att.W2[j] + g @ att.W1[j] + att.b[j])
        alpha = torch.sigmoid(h @ att.w[j] + att.b_psi[j].view(-1 if dims == "multi" else ()))
        parts.append((alpha if dims == "multi" else alpha.unsqueeze(-1)) * x)
    want = att.out(torch.cat(parts, -1))  # W_O (eq. 40)
    torch.testing.assert_close(model(**ex).output, want)


def test_the_gate_without_a_query_gates_each_key_by_itself(gen):
    mod, model = build(gen, GATE_MODEL.format(query="", dims="single"))
    x = mod.example_inputs(2)["image"]
    att = model.gate
    h = torch.relu(x @ att.W.weight.T + att.W.bias)  # eq. 33: no query
    want = torch.sigmoid(h @ att.w[0] + att.b_psi.view(())).unsqueeze(-1) * x
    torch.testing.assert_close(model(**mod.example_inputs(2)).output, want)


def test_a_gate_over_a_padded_sequence_passes_nothing_at_padding(gen):
    body = """model m {
    input s: sequence[L, 4]
    attention gate { query = linear(s, 3)  keys = s  score = additive(d_w = 5)  align = sigmoid }
}
"""
    mod, model = build(gen, body)
    ex = mod.example_inputs(3, seed=2)
    out = model(**ex, return_attention=True)
    pad = ~ex["s_mask"]
    assert pad.any()
    assert (out.output[pad] == 0).all() and (out.attention["gate"][:, 0, 0][pad] == 0).all()
    real = out.attention["gate"][:, 0, 0][~pad]
    assert ((real > 0) & (real < 1)).all()
    # each position's output depends on its own key and query only
    s2 = ex["s"].clone()
    s2[:, 0] += 1.0
    moved = model(s=s2, s_mask=ex["s_mask"]).output
    torch.testing.assert_close(moved[:, 1:], out.output[:, 1:])


def test_gate_memory_grows_with_the_positions_not_their_square(gen):
    """A gate at 64 x 64 pixels keeps O(H W d_w) floats for backward (well under 2 MiB
    here): global attention over the same pixels would keep (H W)^2 weights, 64 MiB."""
    body = GATE_MODEL.format(query="query = cue", dims="multi").replace("(H = 4, W = 6)",
                                                                          "(H = 64, W = 64)")
    mod, model = build(gen, body)
    ex = mod.example_inputs(1)
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = model(**ex).output
    assert sum(saved) < 2 * 2 ** 20, sum(saved)
    y.sum().backward()


# ---- errors -------------------------------------------------------------------------------------


def errors(text: str) -> list[tuple[int, int, str]]:
    with pytest.raises(SpecError) as info:
        pipeline.load_text(HEADER + text, "t.attn")
    return [(d.loc.line, d.loc.column, d.message) for d in info.value.diagnostics]


def test_grid_errors_are_located():
    (line, col, msg), = errors(op_model("maxpool(maxpool(image, 2), 4)", 12, 12))
    assert (line, col) == (7, 16)
    assert msg == "`maxpool` divides axis `H/2` of length 6 by 4, which does not divide it"
    (_, _, msg), = errors("model m {\n input s: sequence[L, 4]\n output y = conv2d(s, 4)\n"
                          " attention a { keys = s  score = additive  align = sigmoid }\n}\n")
    assert msg.startswith("`conv2d` works on the two spatial axes of a grid (B, H, W, C), "
                          "but `s` has (L, 4)")
    (_, _, msg), = errors("model m {\n input image: grid[H, W, 3]\n output y = maxpool(image, 2)"
                          "\n " + GATE + "\n}\n")
    assert "so the length must be known" in msg
    (_, _, msg), = errors(GATE_MODEL.format(query="query = maxpool(cue, 2)", dims="single"))
    assert "pairs each key position with the query at the same position" in msg
    (_, _, msg), = errors(GATE_MODEL.format(query="query = cue", dims="single")
                          .replace("additive(d_w = 7, act = relu)", "general"))
    assert "the general score is not computed per position" in msg
    (_, _, msg), = errors(GATE_MODEL.format(query="query = cue", dims="single")
                          .replace("align = sigmoid", "align = sigmoid\n mask = causal"))
    assert "it takes no `mask`" in msg


SNAPSHOTS = {
    "grid_size_not_divisible": HEADER + op_model(
        "maxpool(maxpool(maxpool(image, 2), 2), 2)", 100, 100),
    "grid_op_on_sequence": HEADER + "model m {\n    input s: sequence[L, 4]\n"
                           "    feature f = upsample(s, 2)\n"
                           "    attention a { keys = f  score = additive }\n}\n",
    "sigmoid_gate_other_positions": HEADER + GATE_MODEL.format(query="query = upsample(cue, 2)",
                                                               dims="multi"),
}


def test_cli_snapshots():
    """``taxcompile check`` on each tests/data/errors/<name>.attn prints <name>.expected
    (one run for all; TAXCOMPILE_UPDATE_SNAPSHOTS=1 rewrites both files)."""
    names = sorted(SNAPSHOTS)
    paths = [DATA / f"{name}.attn" for name in names]
    for name, path in zip(names, paths):
        if UPDATE:
            path.write_text(SNAPSHOTS[name], encoding="utf-8")
        assert path.read_text(encoding="utf-8") == SNAPSHOTS[name], name
    r = subprocess.run([sys.executable, "-m", "taxcompile", "check",
                        *(str(p.relative_to(ROOT)) for p in paths)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr
    parts = [r.stderr[r.stderr.index(str(p.relative_to(ROOT)) + ":"):] for p in paths]
    parts = [a[: len(a) - len(b)] for a, b in zip(parts, parts[1:] + [""])]
    for name, got in zip(names, parts):
        expected = DATA / f"{name}.expected"
        if UPDATE:
            expected.write_text(got, encoding="utf-8")
        assert got == expected.read_text(encoding="utf-8"), name


# ---- the attention U-Net -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def unet():
    from taxcompile.run import load_module

    path = ROOT / "generated" / "oktay2018_attention_unet.py"
    return load_module(path.read_text(encoding="utf-8"), "_taxcompile_grids_unet")


def test_the_unet_is_the_papers_at_160_by_160(unet):
    cfg = unet.Config()
    assert (cfg.H, cfg.W, cfg.f1, cfg.f2, cfg.f3, cfg.f4) == (160, 160, 16, 32, 64, 128)
    model = unet.Model(cfg)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert sum(m.kernel_size == (3, 3) for m in convs) == 14  # 2 per level and decoder level
    assert [type(model.get_submodule(g)).__name__ for g in ("gate3", "gate2", "gate1")] == \
        ["MultiDimAdditiveSigmoidAttention"] * 3


def test_the_unet_runs_forward_and_backward_with_gates_at_each_resolution(unet):
    cfg = unet.Config.tiny()
    cfg.H = cfg.W = 16
    torch.manual_seed(0)
    model = unet.Model(cfg)
    ex = unet.example_inputs(2, cfg=cfg)
    out = model(**ex, return_attention=True)
    assert out.output.shape == (2, 16, 16, cfg.classes)
    for name, side, feats in (("gate3", 4, cfg.f3), ("gate2", 8, cfg.f2), ("gate1", 16, cfg.f1)):
        a = out.attention[name]
        assert a.shape == (2, side, 1, 1, side, feats), name
        assert ((a > 0) & (a < 1)).all(), name
    F.cross_entropy(out.output.reshape(-1, cfg.classes),
                    torch.randint(0, cfg.classes, (2 * 16 * 16,))).backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, n
    with pytest.raises(ValueError, match="input `image`"):
        model(image=torch.randn(2, 8, 8, 1))


def test_oktays_table_iii_row_is_derived_from_the_new_structure():
    row = classify_text((ROOT / "specs" / "oktay2018.attn").read_text(encoding="utf-8"))
    assert row == {"paper": "Oktay et al.", "ref": "67", "feature_multiplicity": "Singular", "feature_levels": "Single-Level",
                   "feature_representations": "Single-Representational", "scoring": "Additive",
                   "alignment": "Global", "dimensionality": "Multi-Dimensional",
                   "query_type": "Self-Attentive + Specialized", "query_multiplicity": "Singular"}


# ---- benchmarks/paper_size.py --------------------------------------------------------------------


def test_paper_size_measures_one_model_at_its_papers_sizes():
    """What a child process of ``python -m benchmarks.paper_size`` does, run here on SAGAN
    (32 x 32 pixels x 256 channels at batch 2: under a second)."""
    from benchmarks import paper_size

    row = paper_size.child(ROOT / "generated" / "zhang2019_sagan.py", 64, 16, "cpu")
    assert row["inputs"] == {"x": [2, 32, 32, 256]} and row["seconds"] > 0
    # in a child process the peak is the model's; here it is this test process's so far
    assert 0 <= row["above_import_bytes"] <= row["peak_bytes"] and row["peak_bytes"] > 0
    row["status"] = "ok"
    assert "| `zhang2019_sagan` |" in paper_size.table([row])


def test_paper_size_arguments():
    from benchmarks import paper_size

    a = paper_size.parse(["--only", "x", "--only", "y", "--length", "32"])
    assert a.only == ["x", "y"] and a.length == 32 and a.inner == 16 and a.limit_gib == 8
    with pytest.raises(SystemExit, match="unknown model"):
        paper_size.models(["no_such_model"])
    assert len(paper_size.models(None)) == len(list((ROOT / "generated").glob("*.py")))
