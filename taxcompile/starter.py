"""``taxcompile new``: a small, commented, valid starter spec, in ``fmt``'s canonical style
(tests/test_fmt.py checks that formatting it changes nothing)."""

from __future__ import annotations

_STARTER = '''\
# {name}: a starter spec (edit me). The language is described in docs/language.md;
# its words (feature model, query, attention module, score, alignment) are those of
# the survey by Brauwers & Frasincar. Check it with `taxcompile check {name}.attn`,
# keep it tidy with `taxcompile fmt {name}.attn`.

# The paper. `cite` is the label a Table III row uses (required); add `ref = N` (the
# survey's reference number) and `row = N` (its row in Table III) if it has them.
paper {name} {{
    cite  = "Author et al."
    title = "Title of the paper"
    year  = 2024
}}

# Constants: numbers, with + - * / and parentheses.
let vocab   = 30000  # vocabulary size
let d       = 256    # embedding and hidden size
let classes = 2      # output classes

# A model variant: a dataflow graph from the inputs through feature models, query
# models and attention modules to the output model (the survey's Fig. 1-2). More
# variants can follow, e.g. `model other : base {{ … }}` to replace statements by name.
model base {{
    # An input: the token ids of a sequence of S words.
    input src: tokens[S] (vocab = vocab)

    # A feature model: embeddings read by a bidirectional LSTM (feature size 2 d).
    feature h = bilstm(embed(src, d), d)

    # A query model: a learned query vector (a self-attentive query, eq. 34).
    query u = learned(d)

    # An attention module over the feature vectors h (keys = values = h): an additive
    # score (eq. 6) and global, softmax alignment (eq. 25). Its name is its context vector.
    attention att {{
        query    = u
        features = h
        score    = additive(d_w = d, act = tanh)
        align    = global
    }}

    # The output model: a classifier over the context vector.
    output label = classify(att, classes)
}}
'''


def starter(name: str) -> str:
    """A small, commented, valid spec named ``name`` in canonical format."""
    return _STARTER.format(name=name)
