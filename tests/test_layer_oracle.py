"""The exported layer is the statement. For every attention statement of specs/ and
examples/ (`taxcompile compile SPEC --layer NAME`), the full generated model is built in
float64 with a seed (Config.tiny()) and run on its example inputs, a forward hook on the
statement's attention module recording what it is given and gives; the layer is built with
the widths and constructor arguments that module was built with, the statement's weights
are copied into it by name (the attention module's own, the projections `NAME_q_proj` /
`NAME_qkv_proj` / …, the learned query `NAME_q`, learned keys, values and memory slots
`NAME_k_learned` / …), and it is fed the queries, keys and values the statement reads (the
features before the spec's projections: the projections' inputs, recorded by hooks too,
less the memory slots the layer puts in front itself) with the same padding mask and query
positions (both counting the keys without the slots, which must be kept). Its output, weights
and extras must equal the module's to 1e-10. The statements the layer refuses are listed in
REFUSED with the reason each must be refused for.

Budget: about 25 s of CPU on a busy 2-core machine (tiny models, one forward each)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from taxcompile import codegen, pipeline  # noqa: E402
from taxcompile.codegen import layer  # noqa: E402
from taxcompile.run import load_module  # noqa: E402

SOURCES = sorted([*(ROOT / "specs").glob("*.attn"), *(ROOT / "examples").glob("*.attn")])
DT = torch.float64

AFFINITY = "reads an affinity matrix (co-attention"
SHARED = "uses the weights of"
BUILT = "a drop-in layer takes a feature or project(feature)"
# statement -> why `--layer` refuses it: it belongs to its model
REFUSED = {
    "alternating_coattention:alternating:c1": SHARED,
    "attention_via_attention:ava:c_c": "the query of attention `c_c` is `concat(…)`: " + BUILT,
    "cheng2016_lstmn:lstmn:intra": "the query of attention `intra` is `concat(…)`: " + BUILT,
    "cosine_temperature:cosine_temperature:learned_beta": "is `embed(…)`: " + BUILT,
    "cosine_temperature:cosine_temperature:fixed_beta": "is `embed(…)`: " + BUILT,
    "gat:gat:layer1": "reads its graph input `adj`",
    "ramapuram2024_sigmoid_attention:sigmoid_lm:decoder.self": "is `project(…)`: " + BUILT,
    "jaegle2021_perceiver:perceiver:block.cross": "is `project(…)`: " + BUILT,  # of norm(z)
    "gat:gat:layer2": "reads its graph input `adj`",
    "interactive_coattention:ian:c_ctx": "is `mean(…)`: " + BUILT,
    "interactive_coattention:ian:c_tgt": "is `mean(…)`: " + BUILT,
    "multi_grained_coattention:mgan:c_coarse": "is `mean(…)`: " + BUILT,
    "multi_grained_coattention:mgan:a_coarse": "is `mean(…)`: " + BUILT,
    "multi_grained_coattention:mgan:c_fine": AFFINITY,
    "multi_grained_coattention:mgan:a_fine": AFFINITY,
    "seo2017_bidaf:bidaf:c2q": AFFINITY,
    "seo2017_bidaf:bidaf:q2c": AFFINITY,
    "wang2016_input_attention:att_input_cnn:a1": "is `mean(…)`: " + BUILT,
    "wang2016_input_attention:att_input_cnn:a2": "is `mean(…)`: " + BUILT,
    "li2018:hatn:p_sent": "the keys of attention `p_sent` are `positional(…)`: " + BUILT,
    "li2018:hatn:np_sent": "the keys of attention `np_sent` are `positional(…)`: " + BUILT,
    "lu2016:parallel:img_w": AFFINITY,
    "lu2016:parallel:q_w": AFFINITY,
    "lu2016:parallel:img_p": AFFINITY,
    "lu2016:parallel:q_p": AFFINITY,
    "lu2016:parallel:img_s": AFFINITY,
    "lu2016:parallel:q_s": AFFINITY,
    "oktay2018:attention_unet:gate3": "the query of attention `gate3` is `upsample(…)`: " + BUILT,
    "wang2019:rban:a2q": "reads `asp` in its alignment (`policy = asp`)",
    "wang2019:rban:q2a": "reads `asp` in its alignment (`policy = asp`)",
    "yu2018:qanet:q_self": SHARED + " `c_self`",
    "yu2018:qanet:c2q": AFFINITY,
    "yu2018:qanet:q2c": AFFINITY,
    "yu2018:qanet:c2q2c": AFFINITY,
}


@functools.lru_cache(maxsize=None)
def load(f: Path):
    return pipeline.load(f)


def statements() -> list[tuple[Path, str, str]]:
    """(spec file, model, statement) of every attention statement, a repeat's once."""
    out = []
    for f in SOURCES:
        for cm in load(f).models:
            for name in dict.fromkeys(a.hop.template if a.hop else a.id
                                      for a in cm.model.attentions):
                out.append((f, cm.model.name, name))
    return out


STATEMENTS = {f"{f.stem}:{model}:{name}": (f, model, name) for f, model, name in statements()}


def test_the_refused_statements_are_refused_for_their_reason():
    for key, (f, model, name) in STATEMENTS.items():
        cs = load(f)
        cm = next(m for m in cs.models if m.model.name == model)
        if key not in REFUSED:
            layer.generate(cs, cm, name, f.name)  # taken, and test_the_layer_is_the_statement
            continue
        with pytest.raises(layer.LayerError) as err:
            layer.generate(cs, cm, name, f.name)
        assert REFUSED[key] in str(err.value), (key, str(err.value))
    assert set(REFUSED) <= set(STATEMENTS), set(REFUSED) - set(STATEMENTS)
    assert len(STATEMENTS) - len(REFUSED) >= 60


class Recorder:
    """The keyword arguments each instance of the generated attention classes was built
    with (the generated code passes them by name)."""

    def __init__(self, module):
        self.calls: dict[int, dict] = {}
        for cls in vars(module).values():
            if isinstance(cls, type) and issubclass(cls, torch.nn.Module) \
                    and cls.__name__.endswith("Attention"):
                self.wrap(cls)

    def wrap(self, cls) -> None:
        init = cls.__init__

        def wrapped(obj, *args, **kwargs):
            self.calls[id(obj)] = kwargs
            init(obj, *args, **kwargs)

        cls.__init__ = wrapped


_MODELS: dict = {}


def full_model(cs, cm, tag: str):
    """The model's generated module, its float64 instance (seeded, tiny, eval) and the
    constructor arguments of its attention modules, built once per model."""
    if tag not in _MODELS:
        mod = load_module(codegen.generate(cs, cm, "t.attn"), f"oracle_{tag}")
        rec = Recorder(mod)
        cfg = mod.Config.tiny()
        torch.manual_seed(0)
        _MODELS[tag] = (mod, cfg, mod.Model(cfg).to(DT).eval(), rec)
    return _MODELS[tag]


def statement_module(net, n):
    """(path, module) of statement ``n``'s attention module in the model (its first hop's)."""
    for path, m in net.named_modules():
        last = path.rsplit(".", 1)[-1]
        block = re.split(r"[.\[]", n.hop.block)[0] if n.hop else None
        if type(m).__name__.endswith("Attention") and last in (n.name, f"{n.name}_attn") \
                and (block is None or block in path.split(".")):
            return path, m
    raise AssertionError(f"no attention module for `{n.id}`")


class Capture:
    """The statement module's calls and, before each, the projections' inputs: hooks on
    the module and on the Linear modules beside it named NAME_<roles>_proj."""

    def __init__(self, net, path: str, module, name: str):
        self.calls: list[dict] = []
        self.proj_in: dict[str, torch.Tensor] = {}  # roles ("q", "kv", "qkv") -> the input
        self.seen: list[dict] = []  # proj_in at each call
        parent = net.get_submodule(path.rsplit(".", 1)[0]) if "." in path else net
        self.projections = {}
        for child, m in parent.named_children():
            roles = child[len(name) + 1:-len("_proj")]
            if child.startswith(name + "_") and child.endswith("_proj") and roles \
                    and set(roles) <= set("qkv") and isinstance(m, torch.nn.Linear):
                self.projections[roles] = m
                m.register_forward_hook(lambda _m, args, out, r=roles:
                                        self.proj_in.__setitem__(r, args[0]))
        module.register_forward_pre_hook(self.before, with_kwargs=True)
        module.register_forward_hook(self.after, with_kwargs=True)

    def before(self, m, args, kwargs):
        self.calls.append(dict(args=args, kwargs=dict(kwargs), rng=torch.get_rng_state(),
                               proj_in=dict(self.proj_in)))

    def after(self, m, args, kwargs, out):
        self.calls[-1]["out"] = out


def doubled(inputs: dict) -> dict:
    return {k: v.to(DT) if torch.is_tensor(v) and v.is_floating_point() else v
            for k, v in inputs.items()}


def learned_query(net, path: str, name: str):
    """The model's parameter of the statement's learned(…) (codegen/features.py)."""
    for p, prm in net.named_parameters():
        if p.rsplit(".", 1)[-1] in (f"{name}_q", f"{name}_learned"):  # learned(d), (K, d)
            return prm
    raise AssertionError(f"no learned query `{name}_q` in the model")


def learned_params(net, name: str, roles) -> dict:
    """The model's parameters of the learned keys, values and memory slots of statement
    ``name``, by the layer's name for each (the model's less the statement's prefix)."""
    # a learned array named as a feature (`feature s = learned(K, d)`) is the feature's
    want = {(f"{r.origin}_{r.param.split('_', 1)[1]}" if r.origin else f"{name}_{r.param}"):
            r.param for r in roles.values() if r.param}
    got: dict = {}
    for p, prm in net.named_parameters():  # a repeat's first hop
        if p.rsplit(".", 1)[-1] in want:
            got.setdefault(want[p.rsplit(".", 1)[-1]], prm)
    assert set(got) == set(want.values()), (want, list(got))
    return got


def layer_config(mod, roles, call, ctor, learned):
    """The layer's Config: the widths the module was given and built with, the rest its
    constructor's arguments (the Config fields are named after them)."""
    q_in, k_in, v_in = call["args"][:3]
    given = {"q": q_in, "k": k_in, "v": v_in}
    kw = {}
    for field in mod.Config.__dataclass_fields__:
        r = field[2] if field.startswith("d_") and len(field) >= 3 else ""
        if field in ("d_q", "d_k", "d_v"):
            role = roles[r]
            kw[field] = learned.shape[-1] if role.own and r == "q" else role.own[-1] \
                if role.own else raw_input(role, call).shape[-1]
        elif field in ("d_q_proj", "d_k_proj", "d_v_proj"):
            kw[field] = given[r].shape[-1]
        elif field == "n_queries":
            kw[field] = learned.shape[0]
        elif field in ("n_kv", "n_slots"):
            kw[field] = next((r.own or r.slots)[0] for r in roles.values()
                             if r.name != "q" and (r.own or r.slots))
        elif field == "depth":  # a parameter by the layer's depth: the first hop's, 1
            kw[field] = 1
        else:
            kw[field] = ctor[field]
    return mod.Config(**kw)


def raw_input(role, call):
    """What forward() of the layer is given for ``role``: the tensor the module got, or
    the input of the projection that made it (with the module's (N, L) leading axes), less
    the memory slots in front (the layer's own)."""
    got = call["args"]["qkv".index(role.name)]
    if role.kind == "project":
        x = next(x for roles, x in call["proj_in"].items() if role.name in roles)
        got = x.reshape(-1, *got.shape[1:-1], x.shape[-1])
    return got[:, slot_count(role):]


def slot_count(role) -> int:
    return role.slots[0] if len(role.slots) == 2 else len(role.slots)  # (M, d), (d,) or ()


def copy_weights(lay, net, module, capture, roles, learned, name: str):
    """The statement's weights into the layer, by name: NAME_attn (or NAME) -> attn,
    NAME_<roles>_proj -> <role>_proj (split by rows where several roles share one matmul),
    NAME_q -> query, NAME_k_learned (…) -> k_learned (…)."""
    lay.attn.load_state_dict(module.state_dict())
    with torch.no_grad():
        for roles_of, proj in capture.projections.items():
            widths = [getattr(lay, f"{r}_proj").out_features for r in roles_of]
            for r, w in zip(roles_of, proj.weight.split(widths, 0)):
                getattr(lay, f"{r}_proj").weight.copy_(w)
        if learned is not None:
            lay.query.copy_(learned)
        for param, prm in learned_params(net, name, roles).items():
            lay.get_parameter(param).copy_(prm)


def close(got, want, what: str, key: str) -> None:
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10,
                               msg=lambda m: f"{key}: the layer's {what} differ:\n{m}")


TAKEN = [pytest.param(*v, id=k) for k, v in STATEMENTS.items() if k not in REFUSED]


@pytest.mark.parametrize("f, model, name", TAKEN)
def test_the_layer_is_the_statement(f, model, name):
    cs = load(f)
    cm = next(m for m in cs.models if m.model.name == model)
    assert_layer_is_statement(cs, cm, name, f"{f.stem}:{model}:{name}")


def assert_layer_is_statement(cs, cm, name: str, key: str) -> None:
    """The oracle (the module docstring) for statement ``name`` of model ``cm``."""
    n = layer.find(cm, name)
    roles = {r: layer.role(cm, n, r, e) for r, e in (("q", n.query), ("k", n.keys),
                                                     ("v", n.values))}
    tag = re.sub(r"\W", "_", key)
    lmod = load_module(layer.generate(cs, cm, name, "t.attn"), f"oracle_layer_{tag}")
    full, cfg, net, rec = full_model(cs, cm, re.sub(r"\W", "_", key.rsplit(":", 1)[0]))
    path, module = statement_module(net, n)
    capture = Capture(net, path, module, n.name)
    with torch.no_grad():
        net(**doubled(full.example_inputs(cfg=cfg)), return_attention=True)
    # a decoder's step carries coverage the layer is not given: its first call has none
    calls = [c for c in capture.calls if c["kwargs"].get("coverage") is None][:2]
    assert calls, f"{key}: the statement's module was never called"
    learned = learned_query(net, path, roles["q"].origin or n.name) if roles["q"].own else None
    lay = lmod.Layer(layer_config(lmod, roles, calls[0], rec.calls[id(module)], learned))
    lay = lay.to(DT).eval()
    copy_weights(lay, net, module, capture, roles, learned, n.name)
    slots = slot_count(roles["k"])
    for call in calls:
        args, kw = call["args"], call["kwargs"]
        q, k, v = (None if roles[r].own or roles[r].kind in ("none", "keys") else
                   raw_input(roles[r], call) for r in "qkv")
        mask = args[3] if len(args) > 3 else kw.get("key_mask")
        if slots and mask is not None:  # the model keeps its slots: the layer keeps its own
            assert bool(mask[..., :slots].all()), key
            mask = mask[..., slots:]
        at = kw.get("start", kw.get("offset"))
        positions = None if at is None else int(at) - slots
        torch.set_rng_state(call["rng"])  # hard attention samples
        with torch.no_grad():
            c, a, extras = lay(q, k, v, mask=mask, positions=positions, need_weights=True,
                               need_extras=True)
        want_c, want_a, want_extras = call["out"]
        close(c, want_c, "output", key)
        if want_a is not None:
            close(a, want_a, "weights", key)
        assert set(extras) == set(want_extras), key
        for name_, x in want_extras.items():
            close(extras[name_], x, f"extras[{name_!r}]", key)


PMA = """paper t { cite = "T" }
model pma {
    input x: sequence[L, 16]
    attention pool { query = project(learned(16), 8)  keys = project(x, 8)
                     values = project(x, 8)  score = scaled_multiplicative  heads = 2 }
    output y = classify(pool, 3)
}
"""


def test_a_projected_learned_query_is_the_layers_own():
    """PMA's pooling (Lee et al. 2019, Set Transformer): the query is W_Q s, s a learned
    vector. The layer owns s (`query`) and W_Q, takes q=None, and is the statement."""
    cs = pipeline.load_text(PMA, "pma.attn")
    assert_layer_is_statement(cs, cs.models[0], "pool", "pma:pma:pool")
    mod = load_module(layer.generate(cs, cs.models[0], "pool", "pma.attn"), "oracle_pma_api")
    lay = mod.Layer(mod.Config())
    assert dict(lay.named_parameters())["query"].shape == (16,)
    assert lay.q_proj.weight.shape == (8, 16)
    x = torch.randn(2, 5, 16)
    assert lay(None, x, x).shape == (2, 1, 8)
    with pytest.raises(ValueError, match=r"`q`: this layer's query is its own learned "
                                         r"parameter `query` .*: pass q=None"):
        lay(x, x, x)
    with pytest.raises(ValueError, match="`is_causal`: this attention takes no causal mask per "
                                         "call, as its queries are learned, at no position"):
        lay(None, x, x, is_causal=True)
