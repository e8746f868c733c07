"""Classification rules on small specs written for each mechanism, including the
taxonomy values that no Table III paper uses (alternating, interactive and
multi-grained co-attention, attention-via-attention, similarity, sparse…)."""

import pytest

from conftest import classify_text

HEAD = 'paper p { cite = "P" }\n'


def spec(body: str) -> str:
    return HEAD + "model m {\n" + body + "\n}\n"


TWO_INPUTS = """
    input a: sequence[La, 64]
    input b: sequence[Lb, 64]
    feature fa = bilstm(a, 32)
    feature fb = bilstm(b, 32)
"""


def test_alternating_coattention():
    # Fig. 4 / eq. 6-9: self-attend F1 -> c0; c0 queries F2 -> c2; c2 queries F1 -> c1.
    row = classify_text(spec(TWO_INPUTS + """
    attention c0 { features = fa  score = additive(d_w = 32) }
    attention c2 { query = c0  features = fb  score = additive(d_w = 32) }
    attention c1 { query = c2  features = fa  score = additive(d_w = 32) }
    output y = classify(concat(c1, c2), 3)
    """))
    assert row["feature_multiplicity"] == "Alternating Co-attention"
    assert row["query_type"] == "Self-Attentive + Specialized"
    assert row["query_multiplicity"] == "Singular"  # a chain of different modules is no hop


def test_interactive_coattention():
    # Fig. 5 / eq. 10-11: the mean keys of each input query the other, in parallel.
    row = classify_text(spec(TWO_INPUTS + """
    attention ca { query = mean(fb)  features = fa  score = additive(d_w = 32) }
    attention cb { query = mean(fa)  features = fb  score = additive(d_w = 32) }
    output y = classify(concat(ca, cb), 3)
    """))
    assert row["feature_multiplicity"] == "Interactive Co-attention"
    assert row["query_type"] == "Specialized"


def test_parallel_coattention_with_affinity():
    row = classify_text(spec(TWO_INPUTS + """
    affinity A = affinity(fa, fb, form = bilinear, act = tanh)
    attention ca { query = fb  features = fa  affinity = A  score = additive(d_w = 32) }
    attention cb { query = fa  features = fb  affinity = A  score = max_pool }
    output y = classify(concat(ca, cb), 3)
    """))
    assert row["feature_multiplicity"] == "Parallel Co-attention"
    # max_pool reads the affinity: a bilinear form with tanh is an activated general score
    assert row["scoring"] == "Additive + Activated General"


def test_multi_grained_coattention():
    row = classify_text(spec(TWO_INPUTS + """
    affinity A = affinity(fa, fb, form = trilinear)
    attention fine_a { query = fb  features = fa  affinity = A  score = max_pool }
    attention fine_b { query = fa  features = fb  affinity = A  score = max_pool }
    attention coarse_a { query = mean(fb)  features = fa  score = additive(d_w = 32) }
    attention coarse_b { query = mean(fa)  features = fb  score = additive(d_w = 32) }
    output y = classify(concat(fine_a, fine_b, coarse_a, coarse_b), 3)
    """))
    assert row["feature_multiplicity"] == "Multi-Grained Co-attention"


def test_rotatory_needs_three_inputs_both_ways():
    body = """
    input l: sequence[Ll, 32]
    input t: sequence[Lt, 32]
    input r: sequence[Lr, 32]
    feature rt = mean(t)
    attention left { query = rt  features = l  score = activated_general }
    attention right { query = rt  features = r  score = activated_general }
    attention tl { query = left  features = t  score = activated_general }
    attention tr { query = right  features = t  score = activated_general }
    output y = classify(concat(left, right, tl, tr), 3)
    """
    assert classify_text(spec(body))["feature_multiplicity"] == "Rotatory"
    # Rotating back from one context only: the target and the left context attend
    # each other in turn, which is alternating co-attention, not a rotation.
    one_side = body.replace("attention tr { query = right  features = t  score = activated_general }", "") \
        .replace("concat(left, right, tl, tr)", "concat(left, right, tl)")
    assert classify_text(spec(one_side))["feature_multiplicity"] == "Alternating Co-attention"
    # Without any rotation back, the target is never attended: its mean is an
    # auxiliary query (Basic) and each module attends over one input.
    no_rotation = one_side.replace("attention tl { query = left  features = t  score = activated_general }", "") \
        .replace("concat(left, right, tl)", "concat(left, right)")
    row = classify_text(spec(no_rotation))
    assert (row["feature_multiplicity"], row["query_type"]) == ("Singular", "Basic")


def test_attention_via_attention():
    # Fig. 7: word-level context joins the character-level query.
    row = classify_text(spec("""
    input words: tokens[W, C] (vocab = 100)
    input out: tokens[T] (vocab = 100, autoregressive)
    feature fc = bigru(embed(words, 16), 16)            # (W, C, 32) characters
    feature fw = bigru(mean(fc), 16)                     # (W, 32) words
    feature chars = flatten(fc)                          # (W*C, 32) all characters
    query q = gru(embed(out, 16), 32)
    attention cw { query = q  features = fw  score = general }
    attention cc { query = concat(q, cw)  features = chars  score = general }
    output y = classify(concat(cw, cc), 100)
    """))
    assert row["feature_levels"] == "Attention-via-Attention"
    assert row["query_type"] == "Specialized + Basic"
    assert row["feature_multiplicity"] == "Singular"


def test_hierarchical_groups():
    row = classify_text(spec("""
    input doc: tokens[S, W] (vocab = 100)
    feature fw = bigru(embed(doc, 16), 8)
    attention words { query = learned(16)  features = fw  score = additive(d_w = 16) }
    feature fs = bigru(words, 8)
    attention sents { query = learned(16)  features = fs  score = additive(d_w = 16) }
    output y = classify(sents, 5)
    """))
    assert row["feature_levels"] == "Hierarchical"
    assert row["query_type"] == "Self-Attentive"


@pytest.mark.parametrize("score,label", [
    ("additive(d_w = 8)", "Additive"),
    ("multiplicative", "Multiplicative"), ("scaled_multiplicative", "Scaled Multiplicative"),
    ("general", "General"), ("biased_general", "Biased General"),
    ("activated_general(act = relu)", "Activated General"),
    ("similarity(kind = cosine)", "Similarity"), ("similarity(kind = l2)", "Similarity"),
])
def test_score_labels(score, label):
    row = classify_text(spec(f"""
    input x: sequence[L, 16]
    input aux: vector[16]
    attention a {{ query = aux  features = x  score = {score} }}
    """))
    assert row["scoring"] == label
    assert row["query_type"] == "Basic"  # an auxiliary input the model never attends over


def test_concat_score_is_additive_and_scores_keys_alone():
    """Table II's concat, W[q; k], is the additive family without a non-linearity; with a
    query it is refused (the alignment would cancel the query), alone it scores the keys."""
    row = classify_text(spec("""
    input x: sequence[L, 16]
    attention a {  features = x  score = concat(d_w = 8) }
    """))
    assert row["scoring"] == "Additive" and row["query_type"] == "Self-Attentive"


@pytest.mark.parametrize("align,label", [
    ("global", "Global"), ("soft", "Global"), ("hard", "Hard"),
    ("local(D = 4, position = predictive)", "Local"), ("reinforced", "Reinforced"),
    ("sparsemax", "Sparse"), ("entmax", "Sparse"),
])
def test_alignment_labels(align, label):
    row = classify_text(spec(f"""
    input x: sequence[L, 16]
    attention a {{ query = learned(16)  features = x  score = general  align = {align} }}
    """))
    assert row["alignment"] == label


def test_soft_is_written_beside_hard_only():
    text = HEAD + """
    model soft { input x: sequence[L, 8]
                 attention a { query = learned(8)  features = x  score = general } }
    model hard : soft { attention a { query = learned(8)  features = x  score = general
                                      align = hard } }
    """
    assert classify_text(text)["alignment"] == "Soft, Hard"
    only_soft = text.split("model hard")[0]
    assert classify_text(only_soft)["alignment"] == "Global"


def test_capsules_and_multi_dimensional():
    row = classify_text(spec("""
    input x: sequence[L, 16]
    attention caps { query = learned(16)  features = x  score = multiplicative  capsules = 3 }
    attention md { features = x  score = additive(d_w = 16)  dimensionality = multi }
    """))
    assert row["query_multiplicity"] == "Capsule-Based"
    assert row["dimensionality"] == "Single-Dimensional + Multi-Dimensional"


def test_shared_hops_over_the_same_memory_are_multi_hop():
    row = classify_text(spec("""
    input x: sequence[L, 16]
    query q = learned(16)
    repeat hop 3 shared {
        attention a { query = q  features = x  score = general }
        update q = linear(concat(q, a), 16, act = tanh)     # eq. 41
    }
    """))
    assert row["query_multiplicity"] == "Multi-Hop"


def test_stack_re_encoding_its_keys_is_not_multi_hop():
    # Table III does not count stacks that re-encode their own keys (QANet, PSAC).
    row = classify_text(spec("""
    input x: sequence[L, 16]
    feature f = linear(x, 16)
    repeat layer 4 {
        attention a { query = project(f)  keys = project(f)  values = project(f)
                      score = scaled_multiplicative  heads = 2 }
        update f = norm(f + a)
    }
    """))
    assert row["query_multiplicity"] == "Multi-Head"
    assert row["query_type"] == "Self-Attentive"
