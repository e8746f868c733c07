"""Hugging Face `transformers` models read by taxcompile/torchread: BERT, GPT-2, T5, Llama and
ViT built offline from their Config classes (random weights, hidden size 16, one layer), each
classified from its graph. docs/classify-code.md shows these rows; a test holds it to them."""
from pathlib import Path

import pytest
import torch

import taxcompile

T = pytest.importorskip("transformers", reason="Hugging Face `transformers` is not installed "
                        "(pip install transformers)")

IDS = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(0))
SMALL = dict(num_attention_heads=4, intermediate_size=32, max_position_embeddings=16)


def bert():
    c = T.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, **SMALL)
    return T.BertModel(c), {"input_ids": IDS}


def gpt2():
    c = T.GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=4, n_positions=16,
                     bos_token_id=0, eos_token_id=0)
    return T.GPT2Model(c), {"input_ids": IDS}


def t5():
    c = T.T5Config(vocab_size=50, d_model=16, d_kv=4, d_ff=32, num_layers=1,
                   num_decoder_layers=1, num_heads=4, relative_attention_num_buckets=8,
                   relative_attention_max_distance=16)
    return T.T5Model(c), {"input_ids": IDS, "decoder_input_ids": IDS[:, :4]}


def llama():
    c = T.LlamaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                      num_key_value_heads=2, **SMALL)
    return T.LlamaModel(c), {"input_ids": IDS}


def vit():
    c = T.ViTConfig(image_size=8, patch_size=4, num_channels=3, hidden_size=16,
                    num_hidden_layers=1, num_attention_heads=4, intermediate_size=32)
    return T.ViTModel(c), {"pixel_values": torch.randn(2, 3, 8, 8)}


# name -> (captured with, scoring, alignment, query type, query multiplicity, a reason's words)
ROWS = {
    "BERT": (bert, "torch.export", "Scaled Multiplicative", "Global", "Self-Attentive",
             "Multi-Head", "4 heads"),
    "GPT-2": (gpt2, "make_fx", "Scaled Multiplicative", "Global", "Self-Attentive",
              "Multi-Head", "scaled_dot_product_attention"),
    "T5": (t5, "torch.export", "Multiplicative", "Global", "Self-Attentive + Basic",
           "Multi-Head", "decoder_input_ids, which the keys"),
    "Llama": (llama, "torch.export", "Scaled Multiplicative", "Global", "Self-Attentive",
              "Multi-Head", "shared between query heads"),
    "ViT": (vit, "torch.export", "Scaled Multiplicative", "Global", "Self-Attentive",
            "Multi-Head", "pixel_values"),
}


def _doc_row(name, want) -> str:
    return "| " + " | ".join([name, *want[1:6]]) + " |"


@pytest.mark.parametrize("name", list(ROWS))
def test_hugging_face_models(name):
    make, *want = ROWS[name]
    model, inputs = make()
    res = taxcompile.classify(model.eval(), inputs)
    row = res.row()
    assert (res.method, row["scoring"], row["alignment"], row["query_type"],
            row["query_multiplicity"]) == tuple(want[:5]), res.text()
    assert want[5] in res.text()


def test_docs_show_the_hugging_face_rows():
    doc = (Path(__file__).parents[1] / "docs" / "classify-code.md").read_text()
    for name, want in ROWS.items():
        assert _doc_row(name, want) in doc, name
