"""examples/: models of taxonomy values that no Table III paper uses. Each classifies
as the survey describes its mechanism, and is formatted canonically."""

import subprocess
import sys

import pytest

from conftest import ROOT, classify_text

EXAMPLES = ROOT / "examples"

EXPECTED = {
    # Fig. 4, eq. 6-9: the contexts of one input query the other in turn.
    "alternating_coattention": dict(feature_multiplicity="Alternating Co-attention",
                                    query_type="Self-Attentive + Specialized",
                                    scoring="Additive"),
    # Fig. 5, eq. 10-11: the mean keys of each input query the other.
    "interactive_coattention": dict(feature_multiplicity="Interactive Co-attention",
                                    query_type="Specialized", scoring="Activated General"),
    # Fig. 7: a word-level context joins the character-level query (one sentence, two views).
    "attention_via_attention": dict(feature_multiplicity="Singular",
                                    feature_levels="Attention-via-Attention",
                                    query_type="Specialized + Basic"),
    # Coarse (mean of the other input) and fine (max-pooled affinity, eq. 13 and 16) together.
    "multi_grained_coattention": dict(feature_multiplicity="Multi-Grained Co-attention",
                                      query_type="Specialized",
                                      scoring="Multiplicative + General"),
    # eq. 41-42 with shared weights: the same memory read three times.
    "memory_network": dict(query_multiplicity="Multi-Hop", query_type="Basic",
                           feature_levels="Single-Level"),
    # Score modifiers (issue 14): a position term or bias leaves the score and alignment.
    "shaw2018_relative": dict(scoring="Scaled Multiplicative", alignment="Global",
                              query_type="Self-Attentive", query_multiplicity="Multi-Head"),
    "alibi": dict(scoring="Scaled Multiplicative", alignment="Global"),
    "rotary": dict(scoring="Scaled Multiplicative", alignment="Global"),
    "yang2018_localness": dict(scoring="Scaled Multiplicative", alignment="Global"),
    # Coverage (issue 14): w_c c_i^t joins the additive score's inputs, which stays Additive;
    # the decoder's state is the query (Basic), the coverage loss changes no cell.
    "see2017_coverage": dict(scoring="Additive", alignment="Global", query_type="Basic",
                             query_multiplicity="Singular"),
    # A disagreement penalty on the heads is a term of the loss: the row of the Transformer.
    "li2018_disagreement": dict(scoring="Scaled Multiplicative", alignment="Global",
                                query_type="Self-Attentive", query_multiplicity="Multi-Head"),
    # Weights as values (issue 14): alpha^T beta-bar over two modules' weights (Cui et al.);
    # reading the weights leaves each module's row: two dot-product cross-input modules.
    "attention_over_attention": dict(scoring="Multiplicative", alignment="Global",
                                     feature_multiplicity="Parallel Co-attention",
                                     query_type="Specialized"),
    # A pointer network's output is its attention's weights (Vinyals et al.); the query is
    # a decoder over the inputs its previous outputs pointed at: Basic.
    "pointer_network": dict(scoring="Additive", alignment="Global", query_type="Basic",
                            feature_multiplicity="Singular"),
    # Graph attention (issue 14): GAT's activated concat score, a softmax over each node's
    # neighbours (global alignment over them), 8 heads concatenated, then averaged.
    "gat": dict(scoring="Additive", alignment="Global", query_type="Self-Attentive",
                query_multiplicity="Multi-Head", feature_multiplicity="Singular"),
    # Structured attention (issue 25): a linear-chain CRF's marginals over the source, read as
    # global (every position weighted, none sampled, no window); the decoder's query: Basic.
    "kim2017_structured": dict(scoring="General", alignment="Global", query_type="Basic",
                               query_multiplicity="Singular"),
    # A CRF output layer (issue 25) is no attention: the row is that of its self-attention.
    "crf_tagger": dict(scoring="Scaled Multiplicative", alignment="Global",
                       query_type="Self-Attentive", query_multiplicity="Multi-Head"),
    # Broadcasting (issue 25): BiDAF's G = [h; ũ; h ∘ ũ; h ∘ h̃] changes no module; the two
    # directions of attention over one trilinear affinity matrix read as QANet's row does
    # (Table III row 13): parallel co-attention between context and query.
    "seo2017_bidaf": dict(feature_multiplicity="Parallel Co-attention",
                          scoring="Multiplicative", alignment="Global",
                          query_type="Specialized", query_multiplicity="Singular"),
    # Input attention: the weights rescale the words outside the modules (a feature after
    # the alignment, like a gate); each module is a dot-product score of one entity's
    # query, built from another input, over the words: Basic, as the classifier reads an
    # aspect's query (docs/fidelity.md on RBAN).
    "wang2016_input_attention": dict(feature_multiplicity="Singular", scoring="Multiplicative",
                                     alignment="Global", query_type="Basic"),
    # Key-value-predict: splitting h_t changes no cell; the keys of the L previous words
    # (local-m window, forward mask) score the word's own key: self-attention, Additive,
    # Local.
    "daniluk2017_key_value": dict(scoring="Additive", alignment="Local",
                                  query_type="Self-Attentive", query_multiplicity="Singular"),
    # LSRA: the attention branch is the Transformer's multi-head scaled dot-product
    # self-attention; the convolution branch's LightConv (no score, a kernel over a window
    # around each position) reads Local.
    "wu2020_lite_transformer": dict(scoring="Scaled Multiplicative", alignment="Global + Local",
                                    query_type="Self-Attentive",
                                    query_multiplicity="Multi-Head"),
    # Top-k (Zhao et al. 2019): a softmax over each query's k largest scores reads Sparse.
    "zhao2019_topk": dict(scoring="Scaled Multiplicative", alignment="Sparse",
                          query_type="Self-Attentive", query_multiplicity="Multi-Head"),
    # Sigmoid attention (Ramapuram et al. 2024): each weight sigmoid(e + b) on its own, no
    # normalisation over the keys; the survey's closest alignment is Global.
    "ramapuram2024_sigmoid_attention": dict(scoring="Scaled Multiplicative", alignment="Global",
                                            query_type="Self-Attentive",
                                            query_multiplicity="Multi-Head"),
    # Differential attention (Ye et al. 2024): two softmax maps per head, one context per
    # head: still Multi-Head, each map Global.
    "ye2024_differential": dict(scoring="Scaled Multiplicative", alignment="Global",
                                query_type="Self-Attentive", query_multiplicity="Multi-Head"),
    # Talking heads (Shazeer et al. 2020) mix the heads: still Multi-Head, Global.
    "shazeer2020_talking_heads": dict(scoring="Scaled Multiplicative", alignment="Global",
                                      query_type="Self-Attentive",
                                      query_multiplicity="Multi-Head"),
    # Persistent memory (Sukhbaatar et al. 2019): learned keys/values join the keys.
    "sukhbaatar2019_persistent_memory": dict(scoring="Scaled Multiplicative",
                                             alignment="Global", query_type="Self-Attentive",
                                             query_multiplicity="Multi-Head"),
    # x-transformers' head features together: top-k (Sparse), talking heads, memory
    # key/values and head gates (Multi-Head).
    "xtransformers_heads": dict(scoring="Scaled Multiplicative", alignment="Sparse",
                                query_type="Self-Attentive", query_multiplicity="Multi-Head"),
    # Grouped-query attention (issue 25): 8 query heads share 2 key/value heads; still
    # several query heads with one context each: Multi-Head.
    "gqa": dict(scoring="Scaled Multiplicative", alignment="Global",
                query_type="Self-Attentive", query_multiplicity="Multi-Head"),
    # Query-key normalisation: q and k l2-normalised whole, each score s cos(q, k): the
    # Similarity the computation is (a learned-temperature cosine reads the same).
    "qk_norm": dict(scoring="Similarity", alignment="Global",
                    query_type="Self-Attentive", query_multiplicity="Multi-Head"),
    # Routing by agreement (Li et al. 2019, issue 25) joins the heads in place of W_O: each
    # head keeps its own projections, scores and context, so still Multi-Head.
    "li2019_routing": dict(scoring="Scaled Multiplicative", alignment="Global",
                           query_type="Self-Attentive", query_multiplicity="Multi-Head"),
    # Location weights (issue 25) are fixed features of the memory, outside the module:
    # MemNet's hops re-read one memory with the aspect's refined vector (Multi-Hop), an
    # auxiliary input's query (Basic), the additive score, global alignment.
    "tang2016_location_memory": dict(scoring="Additive", alignment="Global", query_type="Basic",
                                     query_multiplicity="Multi-Hop"),
    # Document-wide word weights β_s α_sw are read after both alignments: HAN's row
    # (Table III row 5), Hierarchical, as specs/yang2016.attn.
    "document_word_weights": dict(feature_levels="Hierarchical", scoring="Additive",
                                  alignment="Global", query_type="Self-Attentive",
                                  query_multiplicity="Singular"),
    # LSTMN intra-attention (issue 25): at each step an additive score over the states so
    # far, queried by x_t and h~_(t-1), its own previous context: Self-Attentive, Global.
    "cheng2016_lstmn": dict(scoring="Additive", alignment="Global", query_type="Self-Attentive",
                            query_multiplicity="Singular", feature_multiplicity="Singular"),
    # LSH attention (Kitaev et al. 2020): a softmax over the keys of the query's hash
    # bucket; the kept subset follows the hashed content, as top-k's follows the scores.
    "kitaev2020_reformer": dict(scoring="Scaled Multiplicative", alignment="Sparse",
                                query_type="Self-Attentive", query_multiplicity="Multi-Head"),
    # Transformer-XL (issue 25): its relative terms are added to q·k as Shaw et al.'s are,
    # u and v are biases, not a query: the Transformer decoder's row.
    "dai2019_transformer_xl": dict(scoring="Scaled Multiplicative", alignment="Global",
                                   query_type="Self-Attentive",
                                   query_multiplicity="Multi-Head"),
    # A LLaMA-style decoder: RMSNorm, RoPE, grouped-query attention, qk-norm, SwiGLU and
    # tied embeddings change no cell: the Transformer decoder's self-attention row.
    "modern_lm": dict(scoring="Scaled Multiplicative", alignment="Global",
                      query_type="Self-Attentive", query_multiplicity="Multi-Head"),
    # Learned query sets (`learned(K, d)`: inducing points, seeds, latents) are learned
    # queries (eq. 34), as Yang et al.'s context vector; the set (or the input) attending
    # over a learned set's summary of it attends over its own features: Singular.
    "lee2019_set_transformer": dict(feature_multiplicity="Singular", scoring="Scaled Multiplicative",
                                    alignment="Global", query_type="Self-Attentive",
                                    query_multiplicity="Multi-Head"),
    # The latents re-read the input block after block with refined queries: Multi-Hop.
    "jaegle2021_perceiver": dict(feature_multiplicity="Singular", scoring="Scaled Multiplicative",
                                 alignment="Global", query_type="Self-Attentive",
                                 query_multiplicity="Multi-Head + Multi-Hop"),
    # A cosine score with a temperature (NTM's key strength): still Table II's similarity.
    "cosine_temperature": dict(scoring="Similarity", alignment="Global", query_type="Basic"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_classifies_as_its_mechanism(name):
    row = classify_text((EXAMPLES / f"{name}.attn").read_text(encoding="utf-8"))
    for dim, value in EXPECTED[name].items():
        assert row[dim] == value, (name, dim, row)


def test_every_example_is_listed_and_formatted():
    assert sorted(p.stem for p in EXAMPLES.glob("*.attn")) == sorted(EXPECTED)
    r = subprocess.run([sys.executable, "-m", "taxcompile", "fmt", "--check", "examples/"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_views_of_one_input_are_one_root():
    """Without `of = words` the characters are another input: the same wiring then
    reads as co-attention between two inputs, not attention-via-attention."""
    text = (EXAMPLES / "attention_via_attention.attn").read_text(encoding="utf-8")
    assert ", of = words" in text
    row = classify_text(text.replace(", of = words", ""))
    assert row["feature_multiplicity"] == "Parallel Co-attention"
    assert row["feature_levels"] == "Single-Level"
