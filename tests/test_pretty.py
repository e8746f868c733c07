"""``taxcompile/codegen/pretty.py``: the line-wrapping pretty printer for generated code.

A corpus of long statements like the generator emits is wrapped at several indents and widths:
every line fits (unless it holds an unbreakable chunk, checked precisely), the AST is the
input's, and comments survive word for word.  Then targeted cases (unbreakable atoms, block
openers, comments, bad input), determinism and a hypothesis property over random nested calls.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import sys
import tokenize
from pathlib import Path
from textwrap import dedent

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
_PATH = ROOT / "taxcompile" / "codegen" / "pretty.py"


def _load():
    """The module by its path: it is standard-library only, so the test does not depend on
    the rest of the package importing (or on its third-party dependencies)."""
    spec = importlib.util.spec_from_file_location("_taxcompile_codegen_pretty", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


pretty = _load()
wrap, wrap_comment = pretty.wrap, pretty.wrap_comment

# Long statements in the style of the generator's output (several taken from generated/).
CORPUS = [
    "c = local_band(q, k, v, key_mask, start, self.window, k.shape[-1] ** -0.5, self.sigma)"
    "  # (N, H, Lq, d_v / H)",
    "self.encoder_self_qkv_proj = nn.ModuleList(nn.Linear(cfg.d_model, 3 * cfg.d_model, "
    "bias=False) for _ in range(cfg.layers))  # W_Q, W_K, W_V stacked",
    "model_enc_block_self, model_enc_block_self_a, _ = self.model_enc_block_self[j]("
    "model_enc_block_self_q, model_enc_block_self_k, model_enc_block_self_v, context_mask, "
    "need_weights=return_attention)  # (B, C, 128)",
    "y_11 = self.d1_conv(torch.cat([gate1, F.interpolate(d2.movedim(-1, 1), size=x1.shape[1:-1], "
    "mode=\"nearest\").movedim(1, -1)], -1).transpose(1, 2)).transpose(1, 2)"
    "  # (B, H*W, 16): convolve over positions",
    "fused = torch.cat([pool(self.fused_norm(v + v_guided_question), video_mask, \"mean\"), "
    "pool(self.fused_norm2(q + q_guided_video), question_mask, \"mean\")], -1)"
    "  # (B, 1024): feature `fused`",
    "self.s_gru_cells = nn.ModuleList(nn.GRUCell(cfg.d_emb + 2 * cfg.hidden if i == 0 else "
    "cfg.hidden, cfg.hidden) for i in range(1))  # input feeding: [x_t; c_(t-1)]",
    "img_w_A = C_w if question_mask is None else C_w.masked_fill(~question_mask.reshape(-1, "
    "qw.shape[-2], 1), 0.0)  # (N, Lq, Lk): padded query rows left out",
    "S = (c @ self.S_w[0]).unsqueeze(-1) + (q @ self.S_w[1]).unsqueeze(-2) + "
    "(c * self.S_w[2]) @ q.transpose(-1, -2)  # (B, C, Q): affinity `S`",
    "np_word_q1 = np_word_q.view(B, 1, -1).expand(*xn.shape[:2], -1).reshape(-1, 1, "
    "np_word_q.shape[-1])  # (N, 1, d_q): one query per group",
    "l = torch.ceil(pos.detach() - D).long().unsqueeze(-1) + torch.arange(2 * D + 1, "
    "device=q.device)  # (N, Lq, 2D + 1)",
    "return QueryBlocks.apply(lambda keep, wq, wk, w: additive_block(wq, wk, w, act), None, "
    "wq, wk, w)",
    "return torch.compiler.is_compiling() and sigma is None and (q.is_cuda or not "
    "torch.is_grad_enabled())",
    "raise ValueError(f\"input `{name}`: expected a tensor of shape {want}, got "
    "{type(x).__name__}\")",
    "raise ValueError(f\"CausalMultiHeadScaledMultiplicativeAttention: heads = {heads} must "
    "divide d_q = {d_q}, d_k = {d_k} \" f\"and d_v = {d_v} (got {heads=}, {d_v % heads=})\")",
    "log.info(f\"step {step:>6d} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e} "
    "{{literal}} {d['k']!r:>{width}}\", extra={\"tags\": [\"train\", \"eval\"]})  # progress",
    "check_input('image', image, (cfg.image_0, cfg.image_1, 512), False, \"(B, {H}, {W}, 512)"
    "  # not a comment [x]\")  # validates (B, H, W, C) # twice",
    "config = {\"d_model\": cfg.d_model, \"heads\": cfg.heads, \"window\": self.window, "
    "\"sigma\": self.sigma, \"dropout\": 0.1, \"act\": \"tanh\", \"bias\": False}",
    "names = {\"query\", \"key\", \"value\", \"output\", \"gate\", \"bias\", \"scale\", "
    "\"sigma\", \"window\", \"capsules\",}",
    "y = x[:, :, start:start + self.window, :].reshape(B, H, -1, self.window * d)"
    ".transpose(1, 2).contiguous()  # (B, L, H, W*d)",
    "shapes = [tuple(s for s in x.shape if s != 1) for name, x in sorted(inputs.items(), "
    "key=lambda kv: kv[0]) if x is not None and name not in skipped]",
    "out = fn(*args, **{k: v for k, v in kwargs.items() if v is not None}, "
    "scale=k.shape[-1] ** -0.5, dropout_p=self.dropout if self.training else 0.0)",
    "mask[torch.arange(B, device=x.device)[:, None], torch.arange(L, device=x.device)"
    "[None, :] + offset] = True",
    "x = torch.where(mask.unsqueeze(-1), x, x.new_zeros(())).sum(dim=-2) / mask.sum(dim=-1, "
    "keepdim=True).clamp_min(1).to(x.dtype)",
    "attention: dict[str, torch.Tensor] = field(default_factory=dict)"
    "  # module -> weights (return_attention=True)",
    "cache[(name,)] = torch.empty((B, H, L, d), device=q.device, dtype=q.dtype), "
    "torch.zeros((B, H, L), dtype=torch.bool)",
    "return Output(label, attn, log_probs, penalty, capsules, features), {\"loss\": loss, "
    "\"acc\": (pred == y).float().mean()}",
    "@torch.library.custom_op(\"taxcompile::local_band\", mutates_args=(), "
    "device_types=(\"cuda\", \"cpu\"))",
    "assert x.shape[-1] == self.d_model, f\"expected the last axis of x to be {self.d_model}, "
    "got {tuple(x.shape)}\"",
    "gate = torch.sigmoid(self.gate_linear(torch.cat([h, c], -1)) + self.gate_bias * "
    "(scale if scale is not None else 1.0) - (offset or 0.0) ** 2)  # eq. (12)",
    "out['sent_mask'] = keep.expand(out['sent'].shape[:2]).contiguous() | "
    "(out['sent'] != cfg.pad).to(torch.bool)",
]

# Lines that open blocks: parsed with a `pass` body.
OPENERS = [
    "def forward(self, left, target, right, left_mask=None, target_mask=None, right_mask=None, "
    "return_attention: bool = False) -> Output:",
    "def cell_step(cells: nn.ModuleList, x: torch.Tensor, state: list | None) -> "
    "tuple[torch.Tensor, list]:  # one step of the stack",
    "def make(self, act=lambda t: torch.tanh(t) * 0.5, init: Callable[[torch.Tensor], None] | "
    "None = None, *, seed: int = 0, **kw) -> nn.Module:",
    "for i, (layer, norm) in enumerate(zip(self.encoder_layers, self.encoder_norms, "
    "strict=True)):",
    "if x.dim() != 1 + len(sizes) or any(s is not None and s != n for s, n in zip(sizes, "
    "x.shape[1:])):",
    "if (key_mask is not None and key_mask.dtype != torch.bool) or (query_mask is not None and "
    "query_mask.dtype not in (torch.bool, torch.uint8)):",
    "class CausalMultiHeadScaledMultiplicativeAttention(ScaledMultiplicativeAttention, "
    "metaclass=Registry, register=True):",
    "with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16, enabled=use_amp), "
    "torch.no_grad():",
    "while (n := len(queue)) > 0 and not all(done.get(key, False) for key in queue[: n // 2] "
    "if key not in skipped):",
]

INDENTS = (0, 4, 8, 12, 16)
WIDTHS = (100, 60)


# -- helpers ---------------------------------------------------------------------------------
OPEN, CLOSE = ("(", "[", "{"), (")", "]", "}")


def _tokens(src: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(src).readline))


def _split_comment(line: str) -> tuple[str, str | None]:
    """(code, comment text without '# ') of one logical line, via tokenize."""
    for tok in _tokens(line):
        if tok.type == tokenize.COMMENT:
            return line[: tok.start[1]].rstrip(), tok.string[1:].strip()
    return line, None


def _chunks(code: str) -> list[str]:
    """What the printer may not break: string atoms (an f-string whole, also on 3.12+), and
    the runs of statement-level text between the top-level bracket pairs it may split (e.g.
    ``a, b = self.f[j](``: a pair with under 10 characters inside is only split when that
    makes everything fit)."""
    starts = {getattr(tokenize, "FSTRING_START", -1)}
    ends = {getattr(tokenize, "FSTRING_END", -1)}
    atoms, fdepth, fstart = [], 0, 0  # (string, start, end) with f-strings merged
    for tok in _tokens(code):
        if tok.type in starts:
            fstart = tok.start[1] if fdepth == 0 else fstart
            fdepth += 1
        elif tok.type in ends:
            fdepth -= 1
            if fdepth == 0:
                atoms.append(('"', fstart, tok.end[1]))
        elif not fdepth and tok.type in (tokenize.STRING, tokenize.OP):
            atoms.append((tok.string if tok.type == tokenize.OP else '"', *tok.start[1:],
                          tok.end[1]))
    out = [code[a:b] for s, a, b in atoms if s == '"']
    depth, run, opened = 0, 0, 0
    for s, a, b in atoms:
        if s in OPEN:
            depth, opened = depth + 1, (b if depth == 0 else opened)
        elif s in CLOSE:
            depth -= 1
            if depth == 0 and a - opened >= 10:
                out.append(code[run:opened])
                run = a
    out.append(code[run:])
    return out


def _block(lines: list[str]) -> str:
    """Source that parses: a block opener gets a ``pass`` body, a decorator a function."""
    src = "\n".join(lines)
    pad = " " * (len(src) - len(src.lstrip()))
    if src.lstrip().startswith("@"):
        return f"{src}\n{pad}def f(): pass\n"
    return f"{src}\n{pad}    pass\n" if src.rstrip().endswith(":") else src + "\n"


def _dump(src: str) -> str:
    return ast.dump(ast.parse(dedent(src)))


def check(line: str, indent: int, width: int) -> list[str]:
    """Wrap ``line`` and check every promise; returns the output lines."""
    out = wrap(line, indent, width)
    assert out == wrap(line, indent, width)  # deterministic
    code, comment = _split_comment(line)
    comments = [s for s in out if s.lstrip().startswith("#")]
    body = [s for s in out if not s.lstrip().startswith("#")]
    # same AST, as a block under the caller's indentation
    assert _dump(_block([" " * indent + s for s in out])) == _dump(_block([code]))
    # comments moved above the code, word for word
    if indent + len(line) <= width:
        assert out == [line]
        return out
    if comment is not None:
        assert out[: len(comments)] == comments and comments[0].startswith("#")
        words = " ".join(s.lstrip()[1:] for s in comments).split()
        assert words == comment.split()
        assert all(indent + len(s) <= width or " " not in s[2:] for s in comments)
    # every line fits, unless it holds an unbreakable chunk and little else
    chunks = _chunks(code)
    for s in body:
        if indent + len(s) > width:
            assert any(c in s and len(s.strip()) - len(c) <= 16 for c in chunks), (s, out)
    # continuation lines are indented inside the statement
    assert not body[0].startswith(" ")
    assert all(s.startswith("    ") or s.lstrip()[:1] in ")]}" for s in body[1:]), out
    return out


# -- the corpus ------------------------------------------------------------------------------
def test_corpus_is_long_and_parses():
    assert len(CORPUS) + len(OPENERS) >= 25
    for line in CORPUS + OPENERS:
        assert len(line) > 90, line
        ast.parse(_block([_split_comment(line)[0]]))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("indent", INDENTS)
def test_corpus(indent, width):
    for line in CORPUS + OPENERS:
        check(line, indent, width)


def test_corpus_fits_at_100_without_overflow():
    """At the generator's width and indents, only strings over 90 characters overflow."""
    for line in CORPUS + OPENERS:
        if any(len(c) > 90 for c in _chunks(_split_comment(line)[0])):
            continue
        for indent in (0, 4, 8):
            assert all(indent + len(s) <= 100 for s in wrap(line, indent)), line


def test_examples_black_style():
    assert wrap(CORPUS[1], 8) == [
        "# W_Q, W_K, W_V stacked",
        "self.encoder_self_qkv_proj = nn.ModuleList(",
        "    nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False) for _ in range(cfg.layers)",
        ")",
    ]
    assert wrap(CORPUS[0], 12, 60) == [
        "# (N, H, Lq, d_v / H)",
        "c = local_band(",
        "    q, k, v, key_mask, start, self.window,",
        "    k.shape[-1] ** -0.5, self.sigma",
        ")",
    ]
    assert wrap(OPENERS[1], 0) == [
        "# one step of the stack",
        "def cell_step(",
        "    cells: nn.ModuleList, x: torch.Tensor, state: list | None",
        ") -> tuple[torch.Tensor, list]:",
    ]
    # the argument list of the outermost call is split; what follows stays on the last line
    assert wrap("y = nn.utils.rnn.pad_packed_sequence(layer(packed)[0], batch_first=True, "
                "total_length=x.shape[1])[0]", 8) == [
        "y = nn.utils.rnn.pad_packed_sequence(",
        "    layer(packed)[0], batch_first=True, total_length=x.shape[1]",
        ")[0]",
    ]
    # items packed while they fit, one per line when none fit together
    out = wrap("f(" + ", ".join(f"argument_{i}" for i in range(8)) + ")", 0, 40)
    assert out == ["f(", "    argument_0, argument_1, argument_2,",
                   "    argument_3, argument_4, argument_5,", "    argument_6, argument_7", ")"]
    out = wrap("f(" + ", ".join(f"an_argument_with_a_long_name_{i}" for i in range(3)) + ")",
               0, 40)
    assert out == ["f(", "    an_argument_with_a_long_name_0,",
                   "    an_argument_with_a_long_name_1,", "    an_argument_with_a_long_name_2", ")"]


def test_generator_argument_and_lambda_are_one_item():
    out = check(CORPUS[5], 8, 100)
    assert out[2:] == [
        "    nn.GRUCell(cfg.d_emb + 2 * cfg.hidden if i == 0 else cfg.hidden, cfg.hidden)",
        "    for i in range(1)",
        ")",
    ]
    out = check(CORPUS[10], 4, 100)
    assert out[1] == "    lambda keep, wq, wk, w: additive_block(wq, wk, w, act), None, wq, wk, w"


def test_implicit_concatenation_breaks_between_strings():
    out = check(CORPUS[13], 8, 100)
    assert out[0] == "raise ValueError("
    assert out[1].startswith('    f"CausalMulti') and out[2].startswith('    f"and d_v = {d_v}')
    assert out[3:] == [")"]


def test_strings_with_hash_and_brackets_are_atoms():
    out = check(CORPUS[15], 4, 60)
    assert out[:2] == ["# validates (B, H, W, C) # twice", "check_input("]
    assert any('"(B, {H}, {W}, 512)  # not a comment [x]"' in s for s in out)


# -- unbreakable input -----------------------------------------------------------------------
def test_unbreakable_lines_are_left_as_is():
    long_string = "x = " + repr("a string without any brackets " * 4)
    assert wrap(long_string, 4, 60) == [long_string]
    no_brackets = "total = " + " + ".join(f"term_number_{i}" for i in range(10))
    assert wrap(no_brackets, 0, 60) == [no_brackets]
    docstring = '"""' + "A docstring that is far too long for one line. " * 3 + '"""'
    assert wrap(docstring, 4) == [docstring]
    # a long atom inside brackets goes on its own line; the rest still fits
    atom = '"' + "x" * 70 + '"'
    out = wrap(f"raise ValueError({atom}, code, detail=extra)", 8, 60)
    assert out == ["raise ValueError(", f"    {atom},", "    code, detail=extra", ")"]
    assert _dump(_block(out)) == _dump(f"raise ValueError({atom}, code, detail=extra)")
    # an unbreakable comment word
    word = "w" * 120
    assert wrap_comment(f"see {word} here", 4, 60) == ["# see", f"# {word}", "# here"]


def test_bad_input_is_returned_unchanged():
    for line in ["f(" + "a, " * 40, "x = ]" + "b" * 100 + "[", "s = 'unterminated" + "x" * 100,
                 "a = f(x)\nb = g(" + "y, " * 40 + ")"]:
        assert wrap(line, 0, 60) == [line]


def test_leading_indentation_is_kept():
    out = wrap("    " + CORPUS[10], 0, 60)
    assert out == ["    " + s for s in wrap(CORPUS[10], 4, 60)]


# -- comments --------------------------------------------------------------------------------
def test_comment_moves_only_when_too_long():
    short = "x = f(a, b)  # fine"
    assert wrap(short, 8) == [short]
    line = "y = self.proj(torch.cat([h, c], -1))  # a comment that pushes the line past 100 chars"
    assert wrap(line, 20) == ["# a comment that pushes the line past 100 chars",
                              "y = self.proj(torch.cat([h, c], -1))"]
    assert wrap("# " + "word " * 30, 4, 60) == wrap_comment("word " * 30, 4, 60)
    # a '#' inside a string is not a comment
    line = 's = "#' + "x" * 120 + '"'
    assert wrap(line, 0) == [line]


def test_wrap_comment():
    assert wrap_comment("short", 8) == ["# short"]
    assert wrap_comment("") == ["#"]
    text = "W_Q, W_K, W_V stacked: one matmul (eq. 1, 35) " * 4
    out = wrap_comment(text, 12, 60)
    assert all(12 + len(s) <= 60 and s.startswith("# ") for s in out)
    assert " ".join(s[2:] for s in out).split() == text.split()


# -- idempotence and determinism -------------------------------------------------------------
def test_short_lines_are_unchanged():
    for line in ["x = f(a, b)", "def f(self, x):", "return {'a': 1}  # done", "pass", ""]:
        for indent in INDENTS:
            assert wrap(line, indent) == [line]
    # every line the printer emits is short, so wrapping it again changes nothing
    for line in CORPUS + OPENERS:
        for s in wrap(line, 8, 100):
            assert wrap(s, 8, 100) == [s]


def test_deterministic_across_fresh_modules():
    spec = importlib.util.spec_from_file_location("_pretty_again", _PATH)
    again = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(again)
    for line in CORPUS + OPENERS:
        assert again.wrap(line, 12, 60) == wrap(line, 12, 60)


# -- property: random nested calls -----------------------------------------------------------
NAMES = st.sampled_from(["x", "cfg.d_model", "self.proj", "torch.cat", "F.relu", "nn.Linear",
                         "mask", "q", "k.shape", "layer_norm"])
KWS = st.sampled_from(["dim", "bias", "heads", "keepdim", "device", "d_w", "scale"])
LEAVES = st.one_of(
    NAMES,
    st.integers(-999, 99999).map(str),
    st.text(alphabet="ab #()[]{},:=x", max_size=8).map(repr),
)


@st.composite
def calls(draw, depth=3):
    """(source, tree) of a call: tree = (name, [(kw or None, leaf str | subtree)])."""
    name = draw(NAMES)
    n_pos = draw(st.integers(0, 4))
    kws = draw(st.lists(KWS, max_size=3, unique=True))
    if n_pos + len(kws) == 0:
        n_pos = 1
    args = []
    for kw in [None] * n_pos + kws:
        if depth > 0 and draw(st.booleans()):
            args.append((kw, draw(calls(depth - 1))))
        else:
            args.append((kw, draw(LEAVES)))
    return name, args


def _src(node) -> str:
    if isinstance(node, str):
        return node
    name, args = node
    return name + "(" + ", ".join((f"{kw}=" if kw else "") + _src(a) for kw, a in args) + ")"


def _need(node, lead: int, prefix: int) -> int:
    """The width that the fully split layout of ``node`` needs, starting at ``lead`` after
    ``prefix`` unbreakable characters (``kw=`` or ``x = ``), with a comma after it."""
    if isinstance(node, str):
        return lead + prefix + len(node) + 1
    name, args = node
    need = lead + prefix + len(name) + 1
    for kw, arg in args:
        need = max(need, _need(arg, lead + 4, len(kw) + 1 if kw else 0))
    return max(need, lead + 2)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(tree=calls(), indent=st.sampled_from(INDENTS), width=st.integers(30, 100),
       comment=st.one_of(st.none(), st.text(alphabet="ab (),#:", min_size=1, max_size=30)))
def test_property_nested_calls(tree, indent, width, comment):
    code = "y = " + _src(tree)
    line = code if comment is None else f"{code}  # {comment}"
    out = wrap(line, indent, width)
    body = [s for s in out if not s.lstrip().startswith("#")]
    assert _dump("\n".join(body)) == _dump(code)
    if indent + len(line) <= width:
        assert out == [line]
    elif _need(tree, 0, 4) <= width - indent:
        assert all(indent + len(s) <= width for s in body), out
    if comment is not None and out != [line]:
        moved = [s for s in out if s.lstrip().startswith("#")]
        assert " ".join(s[1:] for s in moved).split() == comment.split()


def test_layout_wraps_long_statements_of_a_whole_file_once():
    """The formatter pass over a finished file: a long one-line statement is wrapped at its
    indentation; a long line inside a docstring and a statement already on several lines
    are left as they are."""
    from taxcompile.codegen.layout import layout

    long_doc = "x" * 120
    call = "    y = torch.cat([" + ", ".join(f"alpha_{i}" for i in range(14)) + "], -1)"
    src = (f'def f():\n    """{long_doc}\n    """\n{call}\n'
           "    z = g(\n        1, 2)\n")
    out = layout(src, 100)
    lines = out.split("\n")
    assert long_doc in lines[1]
    assert all(len(x) <= 100 for x in lines if long_doc not in x)
    assert lines[3] == "    y = torch.cat("
    assert "    z = g(\n        1, 2)\n" in out
    compile(out, "<layout>", "exec")
    assert layout(out, 100) == out  # a second pass changes nothing
