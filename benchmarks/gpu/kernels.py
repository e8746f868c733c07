"""Which kernel each attention statement reaches on the device: SDPA's flash,
memory-efficient, cuDNN or math backend (the dispatcher's own choice for the very
arguments of each call, ``torch._fused_sdp_choice``), FlexAttention under torch.compile
(CUDA only: the generated ``flex_ready``), or the eager explicit path (matmul, softmax:
mechanisms no fused kernel computes, or a call that returns the weights).

Every model runs one forward pass without the weights (the path a training or inference
step takes): on CUDA at its paper's sizes (``Config()``: a head width of 8 at
``Config.tiny()`` would send SDPA to its math backend for the size alone) in bf16, on the CPU
at ``Config.tiny()`` in float32. A statement's
module is the attention submodule the call happens in (forward hooks); layers of one
statement are folded (``encoder.*.self_attn``). On CUDA a statement whose SDPA call falls
back to the math backend is a failure, with the dispatcher's reasons; on the CPU the path is
reported only.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import types
import warnings

import torch

from . import models

BACKENDS = {0: "SDPA math", 1: "SDPA flash", 2: "SDPA memory-efficient", 3: "SDPA cuDNN",
            4: "SDPA overrideable", -1: "SDPA error"}


def statement_modules(model, mod) -> dict:
    """{qualified name: module} of the generated attention modules (classes of the generated
    file named ...Attention, or whose forward takes ``need_weights``)."""
    out = {}
    for name, m in model.named_modules():
        cls = type(m)
        if cls.__module__ == mod.__name__ and cls.__name__ != "Model" and (
                "Attention" in cls.__name__ or
                "need_weights" in inspect.signature(cls.forward).parameters):
            out[name] = m
    return out


def fold(name: str) -> str:
    return re.sub(r"\.\d+(?=\.|$)", ".*", name) or "(model)"


def _why_math(q, k, v, mask) -> str:
    """The CUDA dispatcher's reasons for refusing the fused backends (its debug warnings)."""
    try:
        params = torch.backends.cuda.SDPAParams(q, k, v, mask, 0.0, False, False)
    except TypeError:  # older signature without enable_gqa
        params = torch.backends.cuda.SDPAParams(q, k, v, mask, 0.0, False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.backends.cuda.can_use_flash_attention(params, True)
        torch.backends.cuda.can_use_efficient_attention(params, True)
    return "; ".join(str(w.message) for w in caught)[:400]


class Recorder:
    """Wraps the generated module's F.scaled_dot_product_attention and flex_context, and
    records each call against the statement whose forward is running."""

    def __init__(self, mod):
        self.mod, self.stack, self.calls = mod, [], []
        self.saved = {}

    def leave(self, *_) -> None:  # (a forward hook's return value replaces the output)
        self.stack.pop()

    def current(self) -> str:
        return self.stack[-1] if self.stack else "(model)"

    def sdpa(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             **kw):
        choice = int(torch._fused_sdp_choice(q, k, v, attn_mask, dropout_p, is_causal, scale=scale,
                                             **kw))
        call = {"statement": self.current(), "path": BACKENDS.get(choice, str(choice)),
                "dtype": str(q.dtype).replace("torch.", ""), "shape": list(q.shape),
                "mask": None if attn_mask is None else str(attn_mask.dtype).replace("torch.", ""),
                "causal": bool(is_causal)}
        if choice == 0 and q.is_cuda:
            call["why"] = _why_math(q, k, v, attn_mask)
        self.calls.append(call)
        return self.saved["F"].scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
            **kw)

    @contextlib.contextmanager
    def installed(self, model, eager: bool = True):
        """The wrappers in place; ``eager=False`` (under torch.compile) wraps flex_context
        alone: no hooks, no SDPA shim for dynamo to trace."""
        mod = self.mod
        F = self.saved["F"] = getattr(mod, "F", torch.nn.functional)
        if eager and hasattr(mod, "F"):  # (a module that never calls SDPA may not import F)
            shim = types.SimpleNamespace(**{k: getattr(F, k) for k in dir(F)
                                            if not k.startswith("__")})
            shim.scaled_dot_product_attention = self.sdpa
            mod.F = shim
        handles = []
        for name, m in statement_modules(model, mod).items() if eager else ():
            handles.append(m.register_forward_pre_hook(
                lambda _m, _a, name=fold(name): self.stack.append(name)))
            handles.append(m.register_forward_hook(self.leave))
        if hasattr(mod, "flex_context"):
            real = self.saved["flex_context"] = mod.flex_context

            def flex(*a, **k):
                self.calls.append({"statement": "(flex)", "path": "FlexAttention (compiled)"})
                return real(*a, **k)
            mod.flex_context = flex
        try:
            yield
        finally:
            if eager and hasattr(mod, "F"):
                mod.F = self.saved["F"]
            if "flex_context" in self.saved:
                mod.flex_context = self.saved["flex_context"]
            for h in handles:
                h.remove()


def statement_ok(calls: list[dict], device: str) -> bool:
    """A statement that calls SDPA must reach a fused backend on CUDA; the CPU's choice is
    reported only (its flash kernel is one of several it may take)."""
    return device != "cuda" or all(c["path"] != "SDPA math" for c in calls)


def flex_statements(model, mod) -> list[str]:
    """The statements whose class can take FlexAttention (its forward calls flex_context)."""
    return sorted({fold(n) for n, m in statement_modules(model, mod).items()
                   if "flex_context(" in inspect.getsource(type(m).forward)})


def _built(entry, device: str):
    mod = entry.module
    cfg = mod.Config() if device == "cuda" else mod.Config.tiny()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):  # initialised where it runs (paper sizes on CUDA)
        model = mod.Model(cfg).eval().to(dtype=dtype)
    ex = {k: x.to(dtype) if x.is_floating_point() else x
          for k, x in mod.example_inputs(cfg=cfg, device=device).items()}
    head = {"model": entry.name, "dtype": str(dtype).replace("torch.", ""),
            "config": "Config()" if device == "cuda" else "Config.tiny()"}
    return mod, model, ex, head


def kernels_of(entry, device: str) -> dict:
    """The eager forward: each statement's SDPA backends, or the eager path."""
    mod, model, ex, head = _built(entry, device)
    names = sorted({fold(n) for n in statement_modules(model, mod)})
    rec = Recorder(mod)
    with rec.installed(model), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model(**ex)
    flexible = flex_statements(model, mod)
    statements = []
    for name in names:
        calls = [c for c in rec.calls if c["statement"] == name]
        st = {"statement": name, "calls": len(calls),
              "paths": sorted({c["path"] for c in calls}) or ["eager"],
              "ok": statement_ok(calls, device)}
        if name in flexible:
            st["flex"] = "FlexAttention under torch.compile on CUDA: stage kernels_flex"
        math = [c for c in calls if c["path"] == "SDPA math"]
        if math and device == "cuda":
            st["why"] = math[0].get("why", "")
            st["example"] = {k: math[0][k] for k in ("dtype", "shape", "mask", "causal")}
        statements.append(st)
    return {**head, "statements": statements, "ok": all(s["ok"] for s in statements)}


def flex_of(entry, device: str) -> dict | None:
    """The statements that can take FlexAttention: on CUDA the model compiled, and the calls
    of flex_context counted (a statement that never reaches it fails); None for a model
    without such statements."""
    if not hasattr(entry.module, "flex_context"):
        return None
    mod, model, ex, head = _built(entry, device)
    flexible = flex_statements(model, mod)
    if not flexible:
        return None
    if device != "cuda":
        return {**head, "ok": True, "statements": [
            {"statement": n, "calls": 0, "paths": ["eager"], "ok": True,
             "flex": "FlexAttention on CUDA under torch.compile only (flex_ready)"}
            for n in flexible]}
    calls = count_flex(mod, model, ex)
    statements = [{"statement": n, "calls": calls, "ok": calls > 0,
                   "paths": ["FlexAttention (compiled)" if calls else "eager"],
                   "flex": f"{calls} flex_context call(s) in the model under torch.compile"}
                  for n in flexible]
    return {**head, "statements": statements, "ok": calls > 0}


def count_flex(mod, model, ex: dict, backend: str = "inductor") -> int:
    """The calls of the generated flex_context in one forward of ``model`` under
    torch.compile (a Python side effect that dynamo replays)."""
    torch._dynamo.reset()
    rec = Recorder(mod)
    with rec.installed(model, eager=False), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(model, backend=backend)(**ex, validate=False)
    return sum(c["path"].startswith("Flex") for c in rec.calls)


def _each(ctx, fn) -> None:
    for entry in models.entries(ctx.options.get("models")):
        try:
            row = fn(entry, ctx.device)
        except Exception as e:
            row = {"model": entry.name, "ok": False, "error": f"{type(e).__name__}: {e}"[:400],
                   "statements": []}
        if row is not None:
            ctx.emit(row)


def stage(ctx) -> None:
    _each(ctx, kernels_of)


def flex_stage(ctx) -> None:
    _each(ctx, flex_of)
