"""Classifying a large model's code (taxcompile/torchread): Hugging Face's BERT-base (12
layers, 110M parameters) and a 1B-parameter Llama configuration (TinyLlama's sizes), built
on the meta device so that no weight is allocated, classified (`taxcompile.classify`:
torch.export, its ATen decompositions, the recognisers) against `torch.export` of the same
model alone, measured in the same run, the two alternating. The classification must take
seconds, not minutes: its target is a ratio of 6 to the export it cannot do without (the
ATen decompositions alone cost two to three times the export, the recognisers a few
percent; measured 4.9 for BERT-base, 5.0 s, and 3.7 for the Llama, 13 s, on a shared
2-core machine). The figures are wall seconds of one process; --quick uses 2 layers."""

from __future__ import annotations

TARGET = 6.0
SEQ = 128


def bert_base(layers: int = 12):
    """BertModel(BertConfig()) on the meta device (BERT-base's sizes, ``layers`` deep) and
    its keyword inputs, on the meta device too."""
    import torch
    import transformers as T

    with torch.device("meta"):
        model = T.BertModel(T.BertConfig(num_hidden_layers=layers)).eval()
        return model, {"input_ids": torch.zeros(1, SEQ, dtype=torch.long)}


def llama_1b(layers: int = 22):
    """LlamaModel at TinyLlama's sizes (1.0B parameters at 22 layers: hidden 2048, 32 query
    heads over 4 key-value heads) on the meta device, and its inputs."""
    import torch
    import transformers as T

    cfg = T.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                        num_hidden_layers=layers, num_attention_heads=32,
                        num_key_value_heads=4, max_position_embeddings=2048)
    with torch.device("meta"):
        model = T.LlamaModel(cfg).eval()
        return model, {"input_ids": torch.zeros(1, SEQ, dtype=torch.long)}


def _export(model, inputs):
    import torch

    from taxcompile.torchread.capture import _Flat

    return torch.export.export(_Flat(model).eval(), (), inputs, strict=False)


def classify_meta(s) -> list[dict]:
    from .cases import row, skipped

    try:
        import transformers  # noqa: F401
    except ImportError:
        return [skipped("classify_meta", "taxcompile.classify", "torch.export alone",
                        f"<= {TARGET}", "peer `transformers` not installed")]
    import taxcompile

    from .harness import alternate

    out = []
    for name, make, layers in (("bert_base", bert_base, 12), ("llama_1b", llama_1b, 22)):
        layers = 2 if s.quick else layers
        model, inputs = make(layers)
        params = sum(p.numel() for p in model.parameters())
        res = taxcompile.classify(model, inputs)
        got = res.row()
        c_s, b_s = alternate(lambda: taxcompile.classify(model, inputs),
                             lambda: _export(model, inputs), repeats=1 if s.quick else 3,
                             warmup=0)
        ratio = c_s / b_s
        out.append(row(f"classify_meta_{name}", f"taxcompile.classify, {layers} layers on meta "
                       f"({params / 1e6:.0f}M parameters)", "torch.export alone (same run)",
                       c_s, b_s, ratio, f"<= {TARGET}", ratio <= TARGET and bool(got),
                       attentions=len(res.attentions), row_scoring=got.get("scoring"),
                       row_multiplicity=got.get("query_multiplicity")))
    return out


CASES = [classify_meta]
