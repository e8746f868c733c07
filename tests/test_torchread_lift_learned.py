"""`taxcompile lift --torch` writes a learned query (a parameter table broadcast over the batch
that an attention's queries are computed from, reading no input: the Perceiver's latents) as
`feature NAME = learned(N, D)`, and a stack of layers nested in the layers of another stack as
a `repeat` in a `repeat`. The oracle is the classification the survey gives such a model (the
Perceiver's row: a learned query is Self-Attentive, the re-read input Multi-Hop) and the
sketch's text; a position table added to the input is no learned query."""
import re

import torch
from torch import nn

from taxcompile import api
from taxcompile.torchread.lift import lift_module


def lift(*args):
    return re.sub(r" +=", " =", lift_module(*args))


def _body(text, name):
    at = text.index(f"attention {name} {{")
    return text[at:text.index("}", at)]


class _Latents(nn.Module):
    """A Perceiver in small: ``blocks`` times, a learned (8 x 16) latent array queries the
    input (one head), then ``depth`` self-attention layers (two heads) refine it, each
    attention added back to the latents."""

    def __init__(self, blocks=1, depth=0):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(8, 16))
        self.cross = nn.ModuleList(nn.MultiheadAttention(16, 1, batch_first=True)
                                   for _ in range(blocks))
        self.selfs = nn.ModuleList(nn.ModuleList(nn.MultiheadAttention(16, 2, batch_first=True)
                                                 for _ in range(depth)) for _ in range(blocks))

    def forward(self, x):
        z = self.latents.expand(x.shape[0], -1, -1)
        for cross, selfs in zip(self.cross, self.selfs):
            z = z + cross(z, x, x)[0]
            for s in selfs:
                z = z + s(z, z, z)[0]
        return z


class _PositionTable(nn.Module):
    """The near miss: an (L x 16) parameter broadcast over the batch too, but added to the
    input (a learned position embedding) before a self-attention."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(5, 16))
        self.att = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        h = x + self.pos.expand(x.shape[0], -1, -1)
        return self.att(h, h, h)[0]


def test_a_learned_latent_array_lifts_as_the_query_of_a_cross_attention():
    text = lift(_Latents(), (torch.randn(2, 5, 16),), "m")
    assert "feature latents = learned(8, 16)" in text
    body = _body(text, "att_1")
    assert "query = project(latents)" in body and "keys = project(args_0)" in body
    row = api.classify(text).row()  # checks the sketch
    assert (row["query_type"], row["query_multiplicity"]) == ("Self-Attentive", "Singular")


def test_a_parameter_added_to_the_input_is_no_learned_query():
    text = lift(_PositionTable(), (torch.randn(2, 5, 16),), "m")
    api.load(text)
    assert "learned(" not in text and "latents" not in text
    assert "query = project(args_0)" in _body(text, "att_1")


def test_a_stack_nested_in_the_layers_of_a_stack_lifts_as_a_repeat_in_a_repeat():
    text = lift(_Latents(blocks=2, depth=2), (torch.randn(2, 5, 16),), "m")
    assert re.findall(r"^( +)repeat (\w+) (\d+) \{", text, re.M) == \
        [("    ", "layers", "2"), ("        ", "layers_2", "2")]
    inner = text[text.index("repeat layers_2"):]
    assert re.findall(r"attention (\w+) \{", text) == ["att_1", "att_2"]
    assert "query = project(latents)" in _body(text, "att_1") and "heads = 2" in inner
    assert "update latents = latents + att_1" in text[:text.index("repeat layers_2")]
    assert "update latents = latents + att_2" in inner
    row = api.classify(text).row()  # the Perceiver's row (examples/jaegle2021_perceiver)
    assert (row["query_type"], row["query_multiplicity"]) == \
        ("Self-Attentive", "Multi-Head + Multi-Hop")
