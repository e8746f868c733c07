"""Correctness on the device: every model at ``Config.tiny()``, forward and backward, in
float32 and under bf16 autocast, against the same model (the same weights and inputs) in
float64 on the CPU.

What is compared: every floating output, the gradient of every parameter and of every
floating input, for a fixed random output gradient. The error of a tensor is its relative
L2 error ||x - ref|| / ||ref|| (one size of tolerance for outputs and gradients of any
scale). Models run in eval mode (no dropout; hard attention takes its argmax instead of
sampling). generate() (where a model has it): greedy tokens with the KV cache / carried
state and with the whole prefix re-run must be the same on the device.

On the CPU, torch itself may lack a bf16 kernel (oneDNN's LSTM primitive): a bare nn.LSTM
and nn.GRU are probed once at start-up, and a model holding one whose bf16 run raises the
probe's very error is reported as skipped in that mode, with the probe's error. Any other
error stays a failure; on CUDA nothing is probed or skipped.
"""

from __future__ import annotations

import copy
import inspect
import math
import time
import warnings

import torch

from . import models

# ||x - ref|| / ||ref|| allowed. float32 (TF32 off): rounding of reductions only; the
# largest measured on the CPU were 5e-7 (outputs) and 4.6e-4 (x-transformers heads' top-k
# gradients). bf16 autocast keeps 8 bits of mantissa (a relative step of 3.9e-3): outputs
# moved by up to 2.3e-2 (QANet, 5 conv + attention blocks), gradients by up to 0.21
# (QANet's layer-norm weights, small sums of large terms that cancel); a wrong gradient
# is off by ~1.
TOLERANCE = {"float32": {"output": 1e-4, "grad": 2e-3},
             "bf16-autocast": {"output": 5e-2, "grad": 0.3}}
# discrete choices (argmax, top-k, a sparse support) may flip under bf16's rounding: those
# models are compared in float32 only, and under bf16 checked to be finite
DISCRETE = ("hard", "topk", "sparsemax", "entmax", "local", "lsh", "reinforced", "crf")


# the recurrent modules torch runs through one fused kernel (oneDNN on the CPU, cuDNN on CUDA)
RECURRENT = ("LSTM", "GRU")


def probe_recurrent(device: str) -> dict:
    """{"LSTM" | "GRU": the error} for each bare nn.LSTM / nn.GRU that torch cannot run forward
    and backward under CPU bf16 autocast on a float32 input (oneDNN may lack the bf16
    primitive); {} where both run, and always {} on CUDA (nothing is skipped there)."""
    out = {}
    if device != "cpu":
        return out
    for name in RECURRENT:
        torch.manual_seed(0)
        rnn = getattr(torch.nn, name)(4, 4, batch_first=True)
        x = torch.randn(2, 3, 4, requires_grad=True)
        try:
            with warnings.catch_warnings(), torch.autocast("cpu", dtype=torch.bfloat16):
                warnings.simplefilter("ignore")
                y = rnn(x)[0]
            y.float().sum().backward()
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"
    return out


def torch_limit(model, error: str, probe: dict) -> str | None:
    """Why a bf16 run that raised `error` is skipped: the model holds a recurrent module whose
    probe raised the same error (torch's limit, not the model's); None otherwise."""
    kinds = {type(m).__name__ for m in model.modules() if isinstance(m, torch.nn.RNNBase)}
    hit = [k for k in RECURRENT if k in kinds and probe.get(k) == error]
    if not hit:
        return None
    return (f"torch on this CPU has no bf16 autocast kernel for "
            f"{'/'.join('nn.' + k for k in hit)} (probe: {probe[hit[0]]})"[:400])


def _fixed(shape, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def bump_zero_gates(model) -> None:
    """A scalar gate that starts at exactly 0 (SAGAN's gamma) blocks every gradient behind it."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 0 and p.item() == 0:
                p.fill_(0.5)


def output_tensors(out) -> dict:
    y = out.output
    return dict(y) if isinstance(y, dict) else {"output": y}


def forward_backward(model, inputs: dict, dtype, device, autocast: bool) -> dict:
    """{name: tensor on the CPU in float64}: outputs, then parameter and input gradients."""
    model = copy.deepcopy(model).to(device=device, dtype=dtype)
    xs = {}
    for k, x in inputs.items():
        # a copy: .to() may return the caller's tensor itself, whose .grad would accumulate
        x = x.to(device=device, dtype=dtype if x.is_floating_point() else x.dtype).clone()
        xs[k] = x.requires_grad_(True) if x.is_floating_point() else x
    with warnings.catch_warnings(), \
            torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=autocast):
        warnings.simplefilter("ignore")
        outs = output_tensors(model(**xs))
    result, loss = {}, 0.0
    for i, (k, y) in enumerate(outs.items()):
        result[f"out:{k}"] = y.detach().to("cpu", torch.float64 if y.is_floating_point()
                                           else y.dtype)
        if y.is_floating_point() and y.requires_grad:
            g = _fixed(y.shape, 1000 + i).to(device=y.device, dtype=y.dtype)
            loss = loss + (y * g).sum()
    if isinstance(loss, torch.Tensor):
        loss.backward()
    for name, p in model.named_parameters():
        result[f"grad:{name}"] = None if p.grad is None else p.grad.to("cpu", torch.float64)
    for k, x in xs.items():
        if x.is_floating_point():
            result[f"grad:input.{k}"] = None if x.grad is None else x.grad.to("cpu", torch.float64)
    return result


def compare(got: dict, ref: dict, tol: dict) -> dict:
    """Per kind (output / grad): the largest normalised error, the number of tensors and
    elements compared, and the tensors that failed."""
    res = {"output": {"worst": 0.0, "tensors": 0, "elements": 0},
           "grad": {"worst": 0.0, "tensors": 0, "elements": 0}, "failed": []}
    for name, r in ref.items():
        kind = "output" if name.startswith("out:") else "grad"
        x = got.get(name)
        if r is None and x is None:
            continue
        if r is None or x is None or x.shape != r.shape:
            res["failed"].append(f"{name}: missing or of another shape")
            continue
        if not r.is_floating_point():
            err = 0.0 if torch.equal(x, r) else math.inf
        elif not torch.isfinite(x).all():
            err = math.inf
        else:
            scale = r.norm().item()
            diff = (x - r).norm().item() if r.numel() else 0.0
            err = diff / scale if scale > 0 else diff
        res[kind]["worst"] = max(res[kind]["worst"], err)
        res[kind]["tensors"] += 1
        res[kind]["elements"] += r.numel()
        if not err <= tol[kind]:
            res["failed"].append(f"{name}: error {err:.2e} > {tol[kind]:g}")
    return res


def check_generate(model, mod, device) -> dict | None:
    """Greedy tokens with the cache and without it (the prefix re-run), on the device."""
    gen = getattr(model, "generate", None)
    if gen is None:
        return None
    sig = inspect.signature(gen)
    names = list(sig.parameters)
    ex = mod.example_inputs(cfg=model.cfg, device=device)
    args = [ex[n] for n in names[: names.index("max_len")]]
    kw = {k: ex[k] for k in sig.parameters if k.endswith("_mask") and k in ex}
    if "batch_size" in sig.parameters:
        kw["batch_size"] = 2
    with torch.no_grad():  # (every vocabulary has the ids 1 and 2)
        cached = gen(*args, max_len=8, bos=1, eos=2, **kw)
        full = gen(*args, max_len=8, bos=1, eos=2, incremental=False, **kw)
    same = cached.shape == full.shape and torch.equal(cached, full)
    return {"tokens": list(cached.shape), "same": bool(same)}


def check_model(entry, device: str, probe: dict | None = None) -> dict:
    """One model's row; `probe`: probe_recurrent()'s result (the CPU only)."""
    mod = entry.module
    start = time.perf_counter()
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg).eval()
    bump_zero_gates(model)
    ex = mod.example_inputs(cfg=cfg)
    ref = forward_backward(model, ex, torch.float64, "cpu", autocast=False)
    row = {"model": entry.name, "spec": entry.spec, "features": entry.features, "modes": {}}
    discrete = sorted(set(entry.aligns) & set(DISCRETE))
    for mode in ("float32", "bf16-autocast"):
        try:
            got = forward_backward(model, ex, torch.float32, device, autocast=mode != "float32")
        except Exception as e:  # one mode's failure must not hide the other's result
            error = f"{type(e).__name__}: {e}"
            skip = mode != "float32" and torch_limit(model, error, probe or {})
            row["modes"][mode] = {"skipped": skip, "failed": []} if skip else \
                {"failed": [f"raised {error}"[:300]]}
            continue
        res = compare(got, ref, TOLERANCE[mode])
        if mode != "float32" and discrete:  # finite only: a flipped choice is not an error
            res["failed"] = [f for f in res["failed"] if "missing" in f or "inf" in f]
            res["note"] = f"discrete alignment ({', '.join(discrete)}): finite values checked"
        row["modes"][mode] = res
    try:
        g = check_generate(model.to(device), mod, device)
    except Exception as e:
        g = {"same": False, "error": f"{type(e).__name__}: {e}"[:300]}
    if g is not None:
        row["generate"] = g
        row["features"] = [*row["features"], "generate"]
    row["ok"] = all(not m["failed"] for m in row["modes"].values()) and \
        (g is None or g["same"])
    row["seconds"] = round(time.perf_counter() - start, 3)
    return row


def stage(ctx) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 is checked as float32
    torch.backends.cudnn.allow_tf32 = False
    probe = ctx.options.get("recurrent_probe") or {}
    for entry in models.entries(ctx.options.get("models")):
        try:
            row = check_model(entry, ctx.device, probe)
        except Exception as e:
            row = {"model": entry.name, "spec": entry.spec, "features": entry.features,
                   "ok": False, "error": f"{type(e).__name__}: {e}"}
        ctx.emit(row)
