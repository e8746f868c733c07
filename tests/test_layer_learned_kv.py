"""Learned parameters of a statement exported with its drop-in layer (`taxcompile compile
SPEC --layer NAME`): keys and values that are `learned(K, d)` are the layer's own (it takes
k=None, v=None), and keys and values `prepend(x, learned(M, d))` (or `prepend(x, M)`) get
the layer's own M memory slots in front of the k and v it is given, never masked, as the
model puts them. Checked against the statement inside its float64 model (the oracle of
tests/test_layer_oracle.py: the statement's weights copied across by name), and against
scaled dot-product attention written out here with the slots in front."""

from __future__ import annotations

import functools
import math
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from taxcompile import codegen, pipeline  # noqa: E402
from taxcompile.codegen import layer  # noqa: E402
from taxcompile.run import load_module  # noqa: E402
from test_layer_oracle import assert_layer_is_statement  # noqa: E402

DT = torch.float64

SPEC = """paper t { cite = "T" }
let d = 8
let slots = 3
model m {
    input src: tokens[S] (vocab = 12)
    feature e = embed(src, d)
    # memory slots among the keys and values, before their projections, 2 heads
    attention mem { query = project(e)  keys = project(prepend(e, learned(slots, d)))
                    values = project(prepend(e, learned(slots, d)))
                    score = scaled_multiplicative  heads = 2 }
    # a learned memory: K keys and values of its own, the keys projected
    attention lookup { query = project(e)  keys = project(learned(5, d))  values = learned(5, d)
                       score = scaled_multiplicative }
    # the prepend op's own vectors, the values the keys
    attention regs { query = project(e)  features = prepend(e, 2)  score = additive }
    # one learned vector before the keys
    attention one { query = project(e)  features = project(prepend(e, learned(d)))
                    score = scaled_multiplicative }
    # learned sets by name: four queries (PMA's seeds) and slots before the keys; the layer
    # owns copies of the features' parameters
    feature seeds = learned(4, d)
    feature z = learned(slots, d)
    attention named { query = project(seeds)  features = project(prepend(e, z))
                      score = scaled_multiplicative  heads = 2 }
    output y = classify(mean(mem) + mean(lookup) + mean(regs) + mean(one) + mean(named), 3)
}
"""

REFUSED = {
    # nothing gives the batch, and the output is the same for every example
    "all_learned": ("query = learned(2, d)  keys = learned(5, d)  values = learned(5, d)",
                    "its keys and values are learned and so is its query"),
    # a learned set turned by the model first (Perceiver's norm(z)): the layer takes no op
    "turned_set": ("query = project(norm(z))  features = project(e)",
                    "the query of attention `a` is `project(…)`: a drop-in layer takes"),
}


@functools.lru_cache(maxsize=None)
def checked():
    return pipeline.load_text(SPEC, "kv.attn")


@functools.lru_cache(maxsize=None)
def layer_module(name: str):
    cs = checked()
    return load_module(layer.generate(cs, cs.models[0], name, "kv.attn"), f"learned_kv_{name}")


@pytest.mark.parametrize("name", ["mem", "lookup", "regs", "one", "named"])
def test_the_layer_is_the_statement_in_its_model(name):
    """The model's example inputs pad the last positions of all but the first example: the
    padding reaches the layer without the model's slot columns, which are all kept."""
    cs = checked()
    assert_layer_is_statement(cs, cs.models[0], name, f"kv:m:{name}")


def test_the_parameters_have_the_models_names_and_draws():
    """The statement's parameters are the model's less its prefix (mem_k_learned ->
    k_learned, as mem_k_proj -> k_proj), so the statement's state dict loads by name; each
    is drawn as the model's: N(0, 1) / sqrt(d) for learned(…), N(0, 0.02^2) for prepend's."""
    mod = load_module(codegen.generate(checked(), checked().models[0], "kv.attn"),
                      "learned_kv_model")
    torch.manual_seed(0)
    net = mod.Model(mod.Config())
    for name, keys in (("mem", {"k_learned", "v_learned", "k_proj.weight", "v_proj.weight"}),
                       ("lookup", {"k_learned", "v_learned", "k_proj.weight"}),
                       ("regs", {"k_prepend"}), ("one", {"k_q", "k_proj.weight"})):
        lay = layer_module(name).Layer()
        state = {k: v for k, v in net.state_dict().items() if k.startswith(f"{name}_")}
        own = {k[len(name) + 1:]: v for k, v in state.items()}
        assert keys <= set(own) and keys <= set(lay.state_dict()), (name, sorted(own))
        lay.load_state_dict({k: v for k, v in own.items() if k in keys}, strict=False)
        for k in keys:
            assert torch.equal(lay.state_dict()[k], own[k]), (name, k)
    torch.manual_seed(0)
    big = layer_module("mem").Layer(layer_module("mem").Config(n_slots=4000, d_q=16, d_k=16,
                                                               d_v=16))
    assert big.k_learned.shape == (4000, 16)
    assert abs(big.k_learned.std().item() - 16 ** -0.5) < 0.01
    big = layer_module("regs").Layer(layer_module("regs").Config(n_slots=4000))
    assert abs(big.k_prepend.std().item() - 0.02) < 0.001


def written_out(lay, q_in, kv_in, keep):
    """Scaled dot-product attention over [S_k; k] and [S_v; v] (eq. 35, 38-40), the slots
    S in front, written out; keep: (B, Lq, M + Lk) True = attend."""
    B, Lq, _ = q_in.shape
    H = lay.cfg.heads
    M = lay.k_learned.shape[0]

    def heads(x):
        return x.view(B, x.shape[1], H, -1).transpose(1, 2)

    k_all = torch.cat([lay.k_learned.expand(B, M, -1), kv_in], 1)
    v_all = torch.cat([lay.v_learned.expand(B, M, -1), kv_in], 1)
    q, k, v = (heads(x @ w.weight.T) for x, w in ((q_in, lay.q_proj), (k_all, lay.k_proj),
                                                  (v_all, lay.v_proj)))
    e = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~keep[:, None],
                                                                       -math.inf)
    a = e.softmax(-1)
    c = (a @ v).transpose(1, 2).reshape(B, Lq, -1)
    return c @ lay.attn.out.weight.T + lay.attn.out.bias, a


@pytest.mark.parametrize("causal", [False, True])
def test_the_slots_are_never_masked(causal):
    """Padding (B, Lk) and is_causal count the keys given; the M slots before them are
    always attended, also by an example whose every key is padded."""
    mod = layer_module("mem")
    torch.manual_seed(0)
    lay = mod.Layer(mod.Config()).to(DT).eval()
    M, B, L = 3, 3, 5
    x = torch.randn(B, L, 8, dtype=DT)
    pad = torch.ones(B, L, dtype=torch.bool)
    pad[1, -2:] = False
    pad[2] = False
    keep = pad[:, None, :].expand(B, L, L)
    if causal:
        keep = keep & torch.ones(L, L, dtype=torch.bool).tril()
    keep = torch.cat([torch.ones(B, L, M, dtype=torch.bool), keep], -1)
    with pytest.warns(UserWarning, match="keeps no key of example 2"):
        with torch.no_grad():
            c, a = lay(x, x, x, mask=pad, is_causal=causal, need_weights=True)
    want_c, want_a = written_out(lay, x, x, keep)
    torch.testing.assert_close(a, want_a, rtol=0, atol=1e-10)
    torch.testing.assert_close(c, want_c, rtol=0, atol=1e-10)
    assert a.shape == (B, 2, L, M + L)
    assert a[2, :, :, :M].sum(-1).sub(1).abs().max() < 1e-12  # all on the slots
    if causal:  # positions place the queries among the keys given, not among the slots
        with torch.no_grad():
            part = lay(x[:1, 1:3], x[:1], x[:1], is_causal=True, positions=1)
            last = lay(x[:1, -2:], x[:1], x[:1], is_causal=True)  # None: the last Lq
        torch.testing.assert_close(part, c[:1, 1:3], rtol=0, atol=1e-10)
        torch.testing.assert_close(last, c[:1, -2:], rtol=0, atol=1e-10)


def test_learned_keys_take_no_k_and_v():
    mod = layer_module("lookup")
    lay = mod.Layer()
    x = torch.randn(2, 4, 8)
    assert lay(x, None, None).shape == (2, 4, 8)
    own_k = r"^`k`: this layer's keys are its own parameter `k_learned` \(the spec's "
    with pytest.raises(ValueError, match=own_k + r"learned\(…\)\): pass k=None$"):
        lay(x, x, None)
    with pytest.raises(ValueError, match=r"^`v`: .* its own parameter `v_learned` .*: pass "
                                         r"v=None$"):
        lay(x, None, x)
    with pytest.raises(ValueError, match="`is_causal`: this attention takes no causal mask per "
                                         "call, as its keys are learned, at no position"):
        lay(x, None, None, is_causal=True)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_stays_in_its_model_is_refused_with_the_reason(case):
    body, reason = REFUSED[case]
    spec = f"""paper t {{ cite = "T" }}
let d = 8
model m {{
    input src: tokens[S] (vocab = 12)
    feature e = embed(src, d)
    feature z = learned(3, d)
    attention a {{ {body}  score = scaled_multiplicative }}
    output y = classify(mean(a), 3)
}}
"""
    cs = pipeline.load_text(spec, "t.attn")
    with pytest.raises(layer.LayerError, match=re.escape(reason)):
        layer.generate(cs, cs.models[0], "a", "t.attn")


def test_the_command_line_refuses_in_one_line(tmp_path):
    body = REFUSED["all_learned"][0]
    spec = tmp_path / "t.attn"
    spec.write_text(SPEC.replace("attention regs {", f"attention a {{ {body}  score = "
                                 "scaled_multiplicative }\n    attention regs {"))
    out = tmp_path / "a.py"
    run = subprocess.run([sys.executable, "-m", "taxcompile", "compile", str(spec), "--layer",
                          "a", "-o", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "its keys and values are learned and so is its query" in run.stderr
    assert not out.exists()


@pytest.mark.parametrize("spec, name", [(None, "lookup"), (None, "mem"),
                                        ("specs/yang2016.attn", "word"),
                                        ("specs/lin2017.attn", "M")])
def test_the_usage_in_the_docstring_is_a_valid_call(spec, name):
    """The file's Usage passes None where the layer owns the query, keys or values."""
    if spec is None:
        mod = layer_module(name)
    else:
        cs = pipeline.load(ROOT / spec)
        mod = load_module(layer.generate(cs, cs.models[0], name, spec), f"usage_{name}")
    usage = mod.__doc__.split("Usage:\n", 1)[1]
    calls = [line.split("#")[0].strip() for line in usage.splitlines() if "layer(" in line]
    assert len(calls) == 2, usage
    cfg = mod.Config()
    d = {r: getattr(cfg, f"d_{r}", None) for r in "qkv"}
    keys = getattr(cfg, "n_kv", 4)  # the layer's own keys, or the 4 given
    env = {"layer": mod.Layer(cfg), "keep": torch.ones(2, keys, dtype=torch.bool)}
    env.update({r: torch.randn(2, 4, w) for r, w in d.items() if w is not None})
    with torch.no_grad():
        exec(calls[0], env)  # out = layer(…)
        exec(calls[1], env)  # out, weights = layer(…, need_weights=True)
    assert env["out"].shape[0] == 2 and env["weights"].shape[0] == 2


def test_a_learned_set_by_name_is_the_layers_own():
    """`feature seeds = learned(4, d)` read as `project(seeds)` is PMA's query set as
    `project(learned(4, d))` is: the layer owns the (4, d) queries and takes q=None; the
    slots `z` before the keys are its own too (the model's `seeds_learned`, `z_learned`)."""
    lay = layer_module("named").Layer()
    assert lay.query.shape == (4, 8) and lay.k_learned.shape == (3, 8)
    x = torch.randn(2, 5, 8)
    assert lay(None, x, None).shape == (2, 4, 8)
    with pytest.raises(ValueError, match=r"`q`: this layer's queries are its own learned "
                       r"parameter `query`"):
        lay(x, x, None)
