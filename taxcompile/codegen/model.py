"""The rest of a file's plan: the Model class (input checks, the planned forward(),
its records), the ``Output`` fields, the module docstring and ``example_inputs``."""

from __future__ import annotations

import textwrap

from .. import checks, classification, ir
from . import config, generate
from .config import MASK_KINDS, data_inputs, fixed  # noqa: F401  (read here and by others)
from .loss import plan_loss
from .contexts import describe
from .frame import MASKABLE
from .expr import BATCH_NAME, CFG, BinOp, CfgField, Const
from .names import Dim, safe_text
from .plan import FilePlan, ModuleClass, OutputField, Stmt


RECORDS = {  # record container in forward() -> the Output field it fills
    "log_probs": OutputField("log_probs", "dict[str, torch.Tensor]", "field(default_factory=dict)",
                             "hard / reinforced: log p(sample), for REINFORCE"),
    "penalties": OutputField("penalty", "torch.Tensor | float", "0.0",
                             "the attention penalties, times their coefficients: Lin et al.'s "
                             "||AA^T - I||_F^2, Xu et al.'s sum_i (1 - sum_t a_ti)^2, See et "
                             "al.'s coverage loss, Li et al.'s -D"),
    "capsules": OutputField("capsules", "dict[str, tuple[torch.Tensor, torch.Tensor]]",
                            "field(default_factory=dict)", "module -> (p_c, r_c) (eq. 43-45)"),
    "features": OutputField("features", "dict[str, torch.Tensor]", "field(default_factory=dict)",
                            "capsule module -> mean feature vector f"),
    "mems": OutputField("mems", "dict[str, torch.Tensor]", "field(default_factory=dict)",
                        "mem_len: module -> its memory for the next segment (Dai et al.)"),
}
# how forward() starts a record ({} otherwise); `mems` continues the memories it is given
RECORD_STARTS = {"penalties": "[]", "mems": "{} if mems is None else dict(mems)"}


def input_size(p, inp: ir.Input, axis: str) -> str:
    return str(input_dim(p, inp, axis))


def input_dim(p, inp: ir.Input, axis: str) -> Dim:
    """A fixed axis length: its constant's Config field, or a field named after the axis."""
    inp, size = fixed(p.m, inp, axis)
    if dict(inp.sym).get("size:" + axis):
        return p.size(inp, "size:" + axis, size)
    p.axis_fields.setdefault(axis, size)
    return Dim(0, (CfgField(axis),))


def axis_size(p, axis: str) -> Dim:
    """An axis's length in the Config's terms (``cfg.H // 2`` for one resampled by a grid
    operator)."""
    for inp in p.m.inputs:
        if axis in inp.axes and inp.sizes[inp.axes.index(axis)] is not None:
            return input_dim(p, inp, axis)
    if "*" in axis:
        a, b = axis.split("*", 1)
        return Dim(0, (BinOp("*", axis_size(p, a).expr(), axis_size(p, b).expr()),))
    if axis in p.cm.scaled:  # resampled by a grid operator: H/2 -> cfg.H // 2
        base, num, den = p.cm.scaled[axis]
        size = axis_size(p, base).expr()
        size = BinOp("*", size, Const(num)) if num > 1 else size
        return Dim(0, (BinOp("//", size, Const(den)) if den > 1 else size,))
    size = p.cm.sizes[axis]
    return Dim(size) if isinstance(size, int) else Dim(0, (Const(size),))


def axis_length(m: ir.Model, axis: str) -> str:
    """An axis's length at run time, read off the first data input over it."""
    inp = next(i for i in data_inputs(m) if axis in i.axes)
    return f"{inp.id}.shape[{1 + inp.axes.index(axis)}]"


def mask_input_check(p, inp: ir.Input) -> Stmt:
    """``m = check_pair_mask(…)`` / ``adj = check_graph(…)``: shape, type (and values)."""
    batch = f"{data_inputs(p.m)[0].id}.shape[0]"
    if inp.kind == "graph":
        p.helpers.add("check_graph")
        return Stmt(f"{inp.id} = check_graph({inp.id!r}, {inp.id}, {batch}, "
                    f"{axis_length(p.m, inp.axes[0])}, validate)")
    p.helpers.add("check_pair_mask")
    shape = ", ".join([batch] + [axis_length(p.m, a) for a in inp.axes])
    return Stmt(f"{inp.id} = check_pair_mask({inp.id!r}, {inp.id}, ({shape}), validate)")


def input_checks(p) -> list[Stmt]:
    out = []
    for inp in p.m.inputs:
        if inp.kind in MASK_KINDS:
            out.append(mask_input_check(p, inp))
            continue
        sizes = [fixed(p.m, inp, ax)[1] for ax in inp.axes]
        exp = [input_size(p, inp, ax) if size is not None else "None"
               for ax, size in zip(inp.axes, sizes)]
        shown = ["B"] + [ax if size is None else "{" + e + "}"
                         for ax, size, e in zip(inp.axes, sizes, exp)]
        if inp.dim is not None:
            exp.append(p.sym(inp, "dim", inp.dim))
            shown.append("{" + exp[-1] + "}" if not exp[-1].isdigit() else exp[-1])
        want = "(" + ", ".join(shown) + ")"
        want = f'f"{want}"' if "{" in want else repr(want)
        sizes_code = f"({', '.join(exp)}{',' if len(exp) == 1 else ''})"
        axes = f"axes={tuple(inp.axes)!r}, " if inp.axes else ""
        vocab = f"vocab={p.sym(inp, 'vocab', inp.vocab)}, " if inp.kind == "tokens" else ""
        if inp.kind == "pointers" and p.cm.sizes.get(inp.into) is not None:
            vocab = f"vocab={p.axis_size_code(inp.into)}, "  # positions of the axis pointed into
        ids = inp.kind in ("tokens", "pointers")
        longest = [f"({ax!r}, {CfgField('max_len')}, 'max_len')"
                   for ax, size in zip(inp.axes, sizes) if size is None and ax in p.max_len_axes]
        longest_code = f", longest=({', '.join(longest)},)" if longest else ""
        if not ids:
            longest_code += f", dtype=next(self.parameters(), {inp.id}).dtype"
        optional = inp.kind == "alignment"  # a target alignment: given in training only
        if optional:
            out.append(Stmt(f"if {inp.id} is not None:", "the target alignment, when training"))
        out.append(Stmt(f"check_input({inp.id!r}, {inp.id}, {sizes_code}, "
                        f"tokens={ids}, want={want}, {axes}{vocab}"
                        f"validate=validate{longest_code})", depth=int(optional)))
        if optional:
            out.append(Stmt(f"check_alignment({inp.id!r}, {inp.id}, validate)", depth=1))
            p.helpers.add("check_alignment")
        if inp.kind in MASKABLE:
            out.append(Stmt(f"{inp.id}_mask = check_mask({inp.id + '_mask'!r}, {inp.id}_mask, "
                            f"{inp.id}.shape[:{1 + len(inp.axes)}], validate)"))
            p.helpers.add("check_mask")
    p.helpers.add("check_input")
    datas = data_inputs(p.m)
    if len(datas) > 1:  # one batch, and one length per axis the inputs share
        items = ", ".join(f"{i.id!r}: ({i.id}, {tuple(i.axes)!r})" for i in datas)
        out.append(Stmt(f"check_sizes({{{items}}})"))
        p.helpers.add("check_sizes")
    return out


def examples(p) -> list[str]:
    lines, lengths = [], config.example_lengths(p)  # (at most 4,096 positions an input)
    free = {ax: n for ax, n in lengths.items() if fixed(p.m, p.m.inputs[0], ax)[1] is None}
    for ax, size in free.items():
        lines.append(f"{ax} = {size}  # a free axis: any length works")
    lines.append("out = {}")
    for inp in p.m.inputs:
        if inp.kind in MASK_KINDS:
            lines += mask_example(p, inp)
            continue
        dims = ["B"] + [ax if fixed(p.m, inp, ax)[1] is None else input_size(p, inp, ax)
                        for ax in inp.axes]
        if inp.kind == "tokens":
            vocab = p.sym(inp, "vocab", inp.vocab)
            lines.append(f"out[{inp.id!r}] = torch.randint(0, {vocab}, ({', '.join(dims)}), "
                         "generator=g)")
        elif inp.kind == "pointers":  # positions of the axis they point into, in the half
            bound = inp.into if inp.into in free else p.axis_size_code(inp.into)  # never padded
            lines.append(f"out[{inp.id!r}] = torch.randint(0, ({bound} + 1) // 2, "
                         f"({', '.join(dims)}), generator=g)")
        elif inp.kind == "alignment":  # a target alignment: every row a distribution
            lines.append(f"out[{inp.id!r}] = torch.softmax(torch.randn({', '.join(dims)}, "
                         "generator=g), -1)")
        else:
            dims.append(p.sym(inp, "dim", inp.dim))
            lines.append(f"out[{inp.id!r}] = torch.randn({', '.join(dims)}, generator=g)")
    for inp in p.m.inputs:
        if inp.kind in MASKABLE:
            lines.append(f"L = out[{inp.id!r}].shape[{len(inp.axes)}]")
            lines.append("keep = torch.arange(L) < torch.randint((L + 1) // 2, L + 1, (B,), "
                         f"generator=g).view(B, {'1, ' * (len(inp.axes) - 1)}1)")
            lines.append("keep[0] = True")
            lines.append(f"out[{inp.id + '_mask'!r}] = keep.expand(out[{inp.id!r}]"
                         f".shape[:{1 + len(inp.axes)}]).contiguous()")
    lines += gold_off_padding(p)
    lines.append("return {name: x.to(device) for name, x in out.items()}")
    return lines


def gold_off_padding(p) -> list[str]:
    """A target alignment's rows moved off the padded keys (renormalised over the kept ones)
    when one sequence input's padding mask covers its key axis: gold is a real alignment."""
    lines = []
    for gold in (i for i in p.m.inputs if i.kind == "alignment"):
        seq = next((i for i in p.m.inputs if i.kind in MASKABLE and i.axes == gold.axes[-1:]),
                   None)
        if seq is not None:
            lines.append(f"gold = out[{gold.id!r}] * out[{seq.id + '_mask'!r}][:, None, :]  "
                         "# no mass on padded keys")
            lines.append(f"out[{gold.id!r}] = gold / gold.sum(-1, keepdim=True)")
    return lines


def mask_example(p, inp: ir.Input) -> list[str]:
    """A mask input: a random (B, Lq, Lk) keep matrix, each query keeping its first key; a
    graph input: a random edge list, about 4 edges into each node, within each example."""
    size = [ax if fixed(p.m, inp, ax)[1] is None else input_size(p, inp, ax)
            for ax in inp.axes]
    if inp.kind == "mask":
        return [f"keep = torch.rand(B, {', '.join(size)}, generator=g) < 0.7",
                "keep[..., 0] = True",
                f"out[{inp.id!r}] = keep"]
    n = size[0]
    return [f"E = 4 * B * {n}",
            f"dst = torch.randint(0, B * {n}, (E,), generator=g)",
            f"src = dst // {n} * {n} + torch.randint(0, {n}, (E,), generator=g)",
            f"out[{inp.id!r}] = torch.stack([src, dst])  # (2, E): edge src -> dst"]


def file_plan(p) -> FilePlan:
    m, f = p.m, p.frame
    with f.reading():  # the input checks start forward()
        head = input_checks(p)
    example = examples(p)  # (both may add Config fields)
    cfg = config.plan_config(p)
    outputs = [n for n in m.nodes if isinstance(n, ir.Node) and n.kind_ == "output"]
    if not outputs:  # no output model: the last attention module's context
        outputs = [m.attentions[-1]]
    assert {o.id for o in outputs} == p.returned
    if len(outputs) == 1:
        ret = f.vars[outputs[0].id].name
    else:
        ret = "{" + ", ".join(f"{o.id!r}: {f.vars[o.id].name}" for o in outputs) + "}"
    body = list(f.body)
    if BATCH_NAME in f.reads:  # recorded as the code was rendered (Frame.reads)
        head.append(Stmt(f"{BATCH_NAME} = {data_inputs(m)[0].id}.shape[0]"))
    if CFG in f.reads:
        head.insert(0, Stmt(f"{CFG} = self.cfg"))
    records = sorted(f.records - {"attn", "cache"})
    head.append(Stmt("attn = {}", "module -> its weights, when return_attention"))
    for r in records:
        head.append(Stmt(f"{r} = {RECORD_STARTS.get(r, '{}')}"))
    fields = [OutputField("output", "torch.Tensor" if len(outputs) == 1 else
                          "dict[str, torch.Tensor]", None,
                          f"`{outputs[0].id}`" if len(outputs) == 1 else "output name -> tensor"),
              OutputField("attention", "dict[str, torch.Tensor]", "field(default_factory=dict)",
                          "module -> weights (return_attention=True)")]
    fields += [RECORDS[r] for r in records]
    kw = [f"{RECORDS[r].name}={r}" if r != "penalties" else
          f"{RECORDS[r].name}=check_penalty(sum(penalties), validate)" for r in records]
    if "penalties" in records:
        p.helpers.add("check_penalty")
    head, body = generate.forward(p, head, body)  # generate(): the cache
    body.append(Stmt(f"return Output({', '.join([ret, 'attn'] + kw)})"))
    params = [f"{i.id}: torch.Tensor" for i in m.inputs if i.kind != "alignment"] + \
        [f"{i.id}: torch.Tensor | None = None" for i in m.inputs if i.kind == "alignment"] + \
        [f"{i.id}_mask: torch.Tensor | None = None" for i in m.inputs if i.kind in MASKABLE]
    params += ["return_attention: bool = False", "validate: bool = True"]
    if "mems" in records:  # Transformer-XL: the previous segment's memories
        params.append("mems: dict | None = None")
    if generate.on(p):
        params.append("cache: dict | None = None")
    shapes = ", ".join(f"{i.id} {p.shape(checks.Shape(i.axes, i.dim))}" if i.kind not in
                       MASK_KINDS else f"{i.id} (B, {', '.join(i.axes)}) bool mask" if i.kind ==
                       "mask" else f"{i.id} a graph over {i.axes[0]} (edge list (2, E) or "
                       f"(B, {i.axes[0]}, {i.axes[0]}))" for i in m.inputs)
    model_doc = (f"`{m.name}`: inputs {shapes}.", "",
                 "Masks: `<input>_mask` (B, ...) bool or int 0/1, True/1 = a real position, "
                 "for sequence", "inputs (PyTorch's key_padding_mask is the inverse).", "Inputs are checked; validate=False skips the checks that read "
                 "their values", "(token ids < vocab, finite features, 0/1 masks).",
                 f"Returns Output({', '.join(x.name for x in fields)}).")
    if "mems" in records:
        model_doc += ("mems: Output.mems of the previous segment (None: the first); each "
                      "module with `mem_len`", "attends over its memory and this segment "
                      "(Transformer-XL).")
    if generate.on(p):
        model_doc += ("cache: generate()'s state between calls (source side, KV cache, decoder "
                      "state):", f"then `{p.gen.input.id}` holds the new tokens only; "
                      "see generate().")
    model = ModuleClass("Model", model_doc, tuple(f.owner.subs), tuple(params), "Output",
                        tuple(head + body), keeps_cfg=True)
    paper = p.cs.spec.paper
    title = "\n".join(textwrap.wrap(f"{safe_text(paper.title) or paper.id}: model `{m.name}`, "
                                    "generated from its .attn spec.", 88))
    loss = plan_loss(p, outputs, "penalties" in records, "log_probs" in records)  # (it may add a helper)
    return FilePlan(
        source=p.source, title=title, doc=tuple(file_doc(p)), config=cfg, outputs=tuple(fields),
        helpers=tuple(sorted(p.helpers)),
        attention_classes=tuple(p.classes[c] for c in p.classes), blocks=tuple(p.blocks),
        model=model, capsule_loss=any(a.capsules for a in m.attentions),
        examples=tuple(example), masked=any(i.kind in MASKABLE for i in m.inputs),
        flex="local_flex" in p.helpers or "flex_context" in p.helpers,
        generate=generate.plan(p, outputs), loss=loss,
        output_names=tuple(o.id for o in outputs))


def file_doc(p) -> list[str]:
    m, paper = p.m, p.cs.spec.paper
    row = classification.classify_model(p.cm)
    doc = [f"Model `{m.name}` of {safe_text(paper.cite)}"
           f"{f' ({paper.year})' if paper.year else ''}"
           f"{f', ref. [{paper.ref}] of the survey' if paper.ref else ''}.", "",
           "Table III classification, derived from the spec's structure:"]
    for d in classification.DIMENSIONS:
        doc.append(f"    {d.replace('_', ' ')}: {row.cells[d].text(d)}")
    doc += ["", "Attention modules:"]
    for a in m.attentions:
        if a.hop is None or a.hop.first:
            line = f"{a.hop.template if a.hop else a.id}: {describe(a, p.cm.attention[a.id])}"
            doc += ["    " + w for w in textwrap.wrap(line, 88)]
    return doc
