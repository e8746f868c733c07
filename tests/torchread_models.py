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


def xt_mem_kv():
    return _xt(attn_num_mem_kv=3)


def xt_talking():
    return _xt(attn_pre_talking_heads=True, attn_post_talking_heads=True)


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


DOC = {  # the rows docs/classify-code.md shows: factory -> what it is
    "mha": "nn.MultiheadAttention(16, 4), self-attention",
    "mha_cross": "nn.MultiheadAttention(16, 4), queries from another input",
    "transformer_encoder": "nn.TransformerEncoder, 2 layers, 4 heads",
    "xt_encoder": "x-transformers Encoder(heads=4)",
    "xt_gqa": "x-transformers Encoder(heads=4, attn_kv_heads=2)",
    "xt_rotary": "x-transformers Encoder(rotary_pos_emb=True)",
    "xt_alibi": "x-transformers Encoder(alibi_pos_bias=True)",
    "xt_topk": "x-transformers Encoder(attn_sparse_topk=3)",
    "xt_mem_kv": "x-transformers Encoder(attn_num_mem_kv=3)",
    "xt_talking": "x-transformers Encoder(attn_pre_talking_heads=True, "
                  "attn_post_talking_heads=True)",
}


def doc_table() -> str:
    """The Markdown table of docs/classify-code.md (`python tests/torchread_models.py`)."""
    from taxcompile.torchread.report import READ, classify_module

    lines = ["| Model | " + " | ".join(d.replace("_", " ").capitalize() for d in READ)
             + " | Reasons (first attention) |", "|---" * (len(READ) + 2) + "|"]
    for name, what in DOC.items():
        res = classify_module(*globals()[name]())
        row, first = res.row(), res.recognised[0]
        why = "; ".join(f"{d}: {first.values[d][1]}" for d in ("scoring", "alignment",
                                                                 "query_type",
                                                                 "query_multiplicity"))
        lines.append(f"| {what} | " + " | ".join(row[d] for d in READ)
                     + f" | {why.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(doc_table(), end="")
