"""The oracles of tests/specgen.py's ``check_spec``.

``run_model``: the model compiles, imports, builds at ``Config.tiny()`` and runs forward
and backward on its own ``example_inputs`` with finite outputs, penalties and gradients.

Then, for silent wrongness, answers that must agree whatever the weights are:

- ``position_rows``: an attention statement with a position term in its scores
  (relative, rotary, Transformer-XL, ALiBi, Gaussian), exported as a drop-in layer
  (``codegen/layer.py``): the call with the last query alone gives the last row of the
  call with every query. The queries are the last Lq of the Lk key positions (as
  generate()'s KV cache and ``key_keep`` take them), so numbering them from 0 moves the
  one query to the first position and changes its row.
- ``decoding``: a model with ``generate()``: greedy decoding with the cache
  (``incremental=True``), without it, and a greedy loop written here that re-runs
  ``forward()`` on the whole prefix and reads the last position give the same tokens,
  from ``bos`` and after a prompt.

Both run in float64 with every parameter drawn at scale 0.5 (distinct, peaked scores,
so that a wrong row or a wrong token shows)."""

from __future__ import annotations

import inspect
import re

B, LK, MAX_LEN = 2, 6, 5


def run_model(cs, cm, file: str):
    """Builds the model at Config.tiny() and runs it forward and backward (training) and
    forward (eval); returns the module and its source."""
    import torch

    from taxcompile import codegen
    from taxcompile.run import load_module

    src = codegen.generate(cs, cm, file)
    compile(src, file.replace(".attn", ".py"), "exec")
    mod = load_module(src, "specgen_model")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg)
    inputs = mod.example_inputs(cfg=cfg)
    out = model(**inputs)
    where = f"model `{cm.model.name}`"
    loss = torch.zeros(())
    for name, t in _tensors(out.output, "output"):
        assert torch.isfinite(t).all(), f"{where}: {name} is not finite"
        if t.is_floating_point():
            loss = loss + t.float().mean()
    penalty = getattr(out, "penalty", None)
    if isinstance(penalty, torch.Tensor):
        assert torch.isfinite(penalty).all(), f"{where}: the penalty is not finite"
        loss = loss + penalty.sum()
    for name, lp in (getattr(out, "log_probs", None) or {}).items():
        assert torch.isfinite(lp).all(), f"{where}: log_probs[{name}] is not finite"
        loss = loss - lp.sum()
    if loss.requires_grad:
        loss.backward()
        for pname, prm in model.named_parameters():
            if prm.grad is not None:
                assert torch.isfinite(prm.grad).all(), f"{where}: the gradient of {pname} " \
                    "is not finite"
    model.eval()  # the other path: no dropout or sampling, the weights returned
    with torch.no_grad():
        out = model(**inputs, return_attention=True)
    for name, t in [*_tensors(out.output, "output"), *_tensors(out.attention, "attention")]:
        if t.is_floating_point():
            assert torch.isfinite(t).all(), f"{where}, eval(): {name} is not finite"
    return mod, src


def _tensors(value, path: str):
    import torch

    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _tensors(v, f"{path}[{k!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _tensors(v, f"{path}[{i}]")


def randomized(model):
    """The model in float64, eval(), every parameter N(0, 0.5^2)."""
    import torch

    g = torch.Generator().manual_seed(1)
    model = model.double().eval()
    with torch.no_grad():
        for prm in model.parameters():
            prm.copy_(torch.randn(prm.shape, generator=g, dtype=prm.dtype) * 0.5)
    return model


def position_rows(cs, cm, file: str) -> int:
    """Checks every statement of ``cm`` with a position term that a drop-in layer takes;
    returns how many it checked."""
    from taxcompile.codegen import layer
    from taxcompile.run import load_module

    checked, seen = 0, set()
    for n in cm.model.attentions:
        name = n.hop.template if n.hop else n.id
        if (n.position is None and n.bias is None) or name in seen or n.coverage \
                or n.memory is not None:
            continue  # coverage sums the earlier queries' weights; XL's memory, the segment's
        seen.add(name)
        try:
            text = layer.generate(cs, cm, name, file)
        except layer.LayerError:
            continue
        roles = [layer.role(cm, n, r, e).kind
                 for r, e in (("q", n.query), ("k", n.keys), ("v", n.values))]
        if roles[0] == "none" or layer.role(cm, n, "q", n.query).own:
            continue
        mod = load_module(text, "specgen_layer")
        _last_row_is_one_query(mod, roles, f"model `{cm.model.name}`, attention `{name}`")
        checked += 1
    return checked


def _last_row_is_one_query(mod, roles, where: str) -> None:
    import torch

    cfg = mod.Config()
    torch.manual_seed(0)
    lay = randomized(mod.Layer(cfg))
    g = torch.Generator().manual_seed(2)
    lk = getattr(cfg, "n_keys", LK)  # a location score's layer takes its fixed key count
    q = torch.randn(B, lk, cfg.d_q, generator=g, dtype=torch.float64)
    k = torch.randn(B, lk, cfg.d_k, generator=g, dtype=torch.float64)
    v = None if roles[2] == "keys" else torch.randn(B, lk, cfg.d_v, generator=g,
                                                    dtype=torch.float64)
    with torch.no_grad():
        full = lay(q, k, v, need_weights=True)
        one = lay(q[:, -1:], k, v, need_weights=True)
    (c_full, a_full), (c_one, a_one) = full[:2], one[:2]
    torch.testing.assert_close(c_one, c_full[:, -1:], rtol=1e-9, atol=1e-9,
                               msg=lambda m: f"{where}: the call with the last query alone "
                               f"is not the last row of the full call (Lq = Lk = {lk}):\n{m}")
    torch.testing.assert_close(a_one, a_full[:, :, -1:], rtol=1e-9, atol=1e-9,
                               msg=lambda m: f"{where}: the last query's weights alone differ "
                               f"from the full call's last row:\n{m}")


def _decoder(mod, src: str):
    """The model (float64, randomized), the target's name, the output generate() reads
    (a key of ``Output.output``, None for the one output) and generate()'s source inputs
    and their masks from example_inputs (``batch_size`` without a source)."""
    import torch

    target = re.search(r"self\(\*\*inputs, (\w+)=", src).group(1)
    pick = re.search(r"out(\.output(?:\['\w+'\])?)\[:, -1\]", src) or \
        re.search(r"\)(\.output(?:\['\w+'\])?)\[:, -1\]", src)
    key = re.fullmatch(r"\.output\['(\w+)'\]", pick.group(1))
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = randomized(mod.Model(cfg))
    params = list(inspect.signature(model.generate).parameters)
    srcs = params[: params.index("max_len")]
    ex = mod.example_inputs(B, seed=3, cfg=cfg)
    kw = {k: (x.double() if x.is_floating_point() else x) for k, x in ex.items()
          if k in srcs or (k.endswith("_mask") and k[:-5] in srcs and k in params)}
    return model, target, key and key.group(1), kw, {} if srcs else {"batch_size": B}


def decoding(mod, src: str, where: str) -> bool:
    """generate() with the cache == without it == greedy full re-runs, and the output it
    decodes runs over the target's positions (next-token logits); False without
    generate()."""
    import torch

    if "def generate(" not in src:
        return False
    model, target, key, kw, extra = _decoder(mod, src)

    def logits(tokens):
        with torch.no_grad():
            out = model(**kw, **{target: tokens}).output
        return out[key] if key else out

    def rerun(prefix, eos):  # greedy, the whole model on the prefix at every step
        toks, done = prefix, torch.zeros(B, dtype=torch.bool)
        for _ in range(MAX_LEN):
            nxt = logits(toks)[:, -1].float().log_softmax(-1).argmax(-1)
            nxt[done] = eos
            toks = torch.cat([toks, nxt[:, None]], 1)
            done |= nxt == eos
            if done.all():
                break
        return toks[:, prefix.shape[1]:]

    first = logits(torch.ones(B, 3, dtype=torch.long))
    if first.dim() != 3 or first.shape[1] != 3:
        raise AssertionError(f"{where}: generate() decodes output {key or ''} of shape "
                             f"{tuple(first.shape)}, not next-token logits over `{target}`'s "
                             "positions (B, 3, V)")
    V = first.shape[-1]
    g = torch.Generator().manual_seed(4)
    for prompt in (None, torch.randint(0, V, (B, 3), generator=g)):
        want = rerun(torch.ones(B, 1, dtype=torch.long) if prompt is None else prompt, V - 1)
        args = dict(kw, max_len=MAX_LEN, bos=1, eos=V - 1, prompt=prompt, **extra)
        # None: the cache where the model has a cached step (True asks for it: an error
        # naming the reason on a model without one, never a silent re-run)
        cached = "cache" in inspect.signature(model.forward).parameters
        for incremental in (True if cached else None, False):
            got = model.generate(**args, incremental=incremental)
            assert torch.equal(got, want), (
                f"{where}: generate(incremental={incremental}"
                f"{'' if prompt is None else ', prompt=P'}) wrote {got.tolist()}, a greedy "
                f"loop of full forward() runs {want.tolist()}")
    return True
