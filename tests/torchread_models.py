"""Models no one here wrote, built offline with random weights, for tests/test_torchread.py
and docs/classify-code.md (factories: () -> (model, example inputs))."""
import torch
from torch import nn

torch.manual_seed(0)


def mha():
    m = nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(2, 5, 16)
    return m, (x, x, x)


def mha_cross():
    m = nn.MultiheadAttention(16, 4, batch_first=True)
    return m, (torch.randn(2, 3, 16), torch.randn(2, 5, 16), torch.randn(2, 5, 16))


def transformer_encoder():
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.0)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), (torch.randn(2, 5, 16),)


def _xt(**kw):
    from x_transformers import Encoder, TransformerWrapper

    m = TransformerWrapper(num_tokens=20, max_seq_len=16,
                           attn_layers=Encoder(dim=16, depth=1, heads=4, **kw))
    return m, (torch.randint(0, 20, (2, 6)),)


def xt_encoder():
    return _xt()


def xt_gqa():
    return _xt(attn_kv_heads=2)


def xt_rotary():
    return _xt(rotary_pos_emb=True)


def xt_alibi():
    return _xt(alibi_pos_bias=True)


def xt_topk():
    return _xt(attn_sparse_topk=3)


def no_attention():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3), nn.Softmax(-1)), \
        (torch.randn(2, 4),)


class L1Attention(nn.Module):
    """A softmax over negative L1 distances weighing values: no registry score."""

    def forward(self, q, k, v):
        s = -(q.unsqueeze(2) - k.unsqueeze(1)).abs().sum(-1)
        return torch.softmax(s, -1) @ v


def l1_attention():
    return L1Attention(), tuple(torch.randn(2, 4, 8) for _ in range(3))
