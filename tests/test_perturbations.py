"""Structural edits to the real specs change the derived Table III row the way the
survey says. Each test edits the spec text (never a label: there is none) and checks
the cells that must change and a cell that must not."""

import re


from conftest import classify_text


def edit(text: str, old: str, new: str, count: int = 1) -> str:
    assert text.count(old) >= count, f"spec no longer contains {old!r}"
    return text.replace(old, new)


def cut(text: str, pattern: str, replacement: str = "") -> str:
    out, n = re.subn(pattern, replacement, text, flags=re.S)
    assert n, f"pattern {pattern!r} not found"
    return out


def test_one_head_drops_multi_head(spec_text):
    row = classify_text(edit(spec_text("vaswani2017"), "let heads   = 8", "let heads   = 1"))
    assert row["query_multiplicity"] == "Multi-Hop"


def test_one_layer_drops_multi_hop(spec_text):
    row = classify_text(edit(spec_text("vaswani2017"), "let layers  = 6", "let layers  = 1"))
    assert row["query_multiplicity"] == "Multi-Head"
    assert row["query_type"] == "Self-Attentive + Basic"


def test_removing_cross_attention_drops_basic(spec_text):
    text = cut(spec_text("vaswani2017"),
               r"attention cross \{.*?\}\s*update y = norm\(y \+ dropout\(cross, p_drop\)\)")
    row = classify_text(text)
    assert row["query_type"] == "Self-Attentive"
    # The decoder no longer re-reads the encoder output, so no layer is a hop.
    assert row["query_multiplicity"] == "Multi-Head"


def test_changing_the_score_function(spec_text):
    text = spec_text("vaswani2017").replace("scaled_multiplicative", "additive(d_w = 64)")
    assert classify_text(text)["scoring"] == "Additive"
    text = edit(spec_text("bahdanau2015"), "additive(d_w = d_w, act = tanh)", "general")
    assert classify_text(text)["scoring"] == "General"


def test_flattening_the_hierarchy_gives_single_level(spec_text):
    text = edit(spec_text("yang2016"), "tokens[S, W]", "tokens[W]")
    text = cut(text, r"feature hs = .*?attention sentence \{.*?\}")
    text = edit(text, "classify(sentence, classes)", "classify(word, classes)")
    row = classify_text(text)
    assert row["feature_levels"] == "Single-Level"
    assert row["query_type"] == "Self-Attentive"


def test_learned_query_to_decoder_state_gives_basic(spec_text):
    text = edit(spec_text("yang2016"), "input doc: tokens[S, W] (vocab = vocab)",
                "input doc: tokens[S, W] (vocab = vocab)\n"
                "    input prev: tokens[T] (vocab = vocab, autoregressive)\n"
                "    query dec = gru(embed(prev, d_emb), d_w)")
    text = cut(text, r"(attention sentence \{\s*)query    = learned\(d_w\)", r"\1query = dec")
    row = classify_text(text)
    assert row["query_type"] == "Self-Attentive + Basic"
    assert row["feature_levels"] == "Hierarchical"


def test_decoder_state_to_learned_query_gives_self_attentive(spec_text):
    text = edit(spec_text("bahdanau2015"), "query    = s_prev", "query    = learned(hidden)")
    text = edit(text, ", feed = att, init = s0", "")  # a GRU over tgt, no longer a decoder
    text = edit(text, "= prev(s)", "= s")  # no previous step without a decoder
    assert classify_text(text)["query_type"] == "Self-Attentive"


def test_removing_the_affinity_matrix_gives_interactive_coattention(spec_text):
    text = spec_text("lu2016")
    text = re.sub(r"\s+affinity = C_\w", "", text)
    text = re.sub(r"\s+share    = img_\w", "", text)  # eq. 14-15's sharing needs the matrix
    text = re.sub(r"query    = (qw|qp|qs|v)\n", r"query = mean(\1)\n", text)
    row = classify_text(text)
    assert row["feature_multiplicity"] == "Interactive Co-attention"
    assert row["query_type"] == "Specialized"


def test_a_single_level_of_coattention_is_not_hierarchical(spec_text):
    text = spec_text("lu2016")
    text = cut(text, r"affinity C_p.*?attention q_s \{[^}]*\}")
    text = cut(text, r"feature h_p = .*?\n.*?feature h_s = [^\n]*\n")
    text = edit(text, "classify(h_s, answers)", "classify(h_w, answers)")
    row = classify_text(text)
    assert row["feature_levels"] == "Single-Level"
    assert row["feature_multiplicity"] == "Parallel Co-attention"


def test_dropping_the_hard_variant_writes_global(spec_text):
    text = cut(spec_text("xu2015"), r"model hard : soft \{.*\}\s*$")
    assert classify_text(text)["alignment"] == "Global"


def test_dropping_luong_variants(spec_text):
    text = cut(spec_text("luong2015"), r"model global_location : global_dot \{.*\}\s*$")
    assert classify_text(text)["scoring"] == "Multiplicative"
    text = cut(text, r"model local_m : global_dot \{.*?\n\}")
    text = cut(text, r"model local_p : global_dot \{.*?\n\}")
    assert classify_text(text)["alignment"] == "Global"


def test_single_dimensional_weights(spec_text):
    text = spec_text("shen2018").replace("dimensionality = multi", "dimensionality = single")
    assert classify_text(text)["dimensionality"] == "Single-Dimensional"


def test_representations_of_different_inputs_are_not_multi_representational(spec_text):
    # eq. 21-22 weigh several embeddings of the *same* input; stacking the features of
    # two different inputs is a fusion, not a meta-embedding.
    text = edit(spec_text("kiela2018"), "input sent: tokens[L] (vocab = vocab)",
                "input sent: tokens[L] (vocab = vocab)\n    input tags: tokens[L] (vocab = 50)")
    text = edit(text, "fasttext = linear(embed(sent, 300), d_t)",
                "fasttext = linear(embed(tags, 300), d_t)")
    row = classify_text(text)
    assert row["feature_representations"] == "Single-Representational"
    assert row["query_type"] == "Self-Attentive"


def test_one_rotation_drops_multi_hop_and_no_rotation_back_is_not_rotatory(spec_text):
    text = edit(spec_text("wallaart2019"), "let hops    = 3", "let hops    = 1")
    row = classify_text(text)
    assert (row["feature_multiplicity"], row["query_multiplicity"]) == ("Rotatory", "Singular")
    # Without the target-side attention the contexts never query the target back.
    text = cut(spec_text("wallaart2019"), r"attention tgt_l \{[^}]*\}\s*attention tgt_r \{[^}]*\}")
    text = cut(text, r"update q_l = tgt_l\s*update q_r = tgt_r")
    text = edit(text, "hop.ctx_r, hop.tgt_l, hop.tgt_r", "hop.ctx_r")
    assert classify_text(text)["feature_multiplicity"] != "Rotatory"


def test_without_capsules_the_query_is_singular(spec_text):
    text = cut(spec_text("wang2018"), r"\n\s*capsules = 3")
    row = classify_text(text)
    assert row["query_multiplicity"] == "Singular"
    assert row["query_type"] == "Self-Attentive"


def test_without_cross_modal_queries_there_is_no_coattention(spec_text):
    text = spec_text("li2019")
    assert classify_text(text)["feature_multiplicity"] == "Parallel Co-attention"
    text = edit(text, "query = q  keys = v", "query = q  keys = q")
    text = edit(text, "query = v  keys = q", "query = v  keys = v")
    row = classify_text(text)
    assert row["feature_multiplicity"] == "Singular"
    assert row["query_type"] == "Self-Attentive"
    assert row["scoring"] == "Scaled Multiplicative"
