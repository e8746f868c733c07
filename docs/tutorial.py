# %% [markdown]
# # taxcompile from Python: build, train and inspect an attention model
#
# A notebook in the percent format: open it in Jupyter (with jupytext), VS Code or
# PyCharm as a notebook, or run it as a script (`python docs/tutorial.py`, about ten
# seconds on a laptop's CPU; CI runs it, tests/test_tutorial.py). It needs the `torch`
# extra (`pip install -e '.[torch]'`), and graphviz's `dot` for the drawn diagram.
#
# We write a spec, read its Table III row, train the model briefly on a toy task, look
# at where it attends, draw it, and save and load it.

# %%
import io
import shutil

import torch

import taxcompile

# %% [markdown]
# ## 1. A spec
#
# A sentence classifier in the survey's vocabulary: embeddings are the feature model, a
# learned vector is the query (a self-attentive query, eq. 34), an additive score (eq. 6)
# with global alignment (eq. 25) weighs the words, and the output model classifies the
# context vector. `taxcompile.build` takes this text (or a path to a `.attn` file).

# %%
SPEC = """
paper tutorial { cite = "Tutorial" }

let vocab = 32
let d     = 16

model keyword {
    input words: tokens[S] (vocab = vocab)
    feature h = embed(words, d)
    query u = learned(d)
    attention att {
        query    = u
        features = h
        score    = additive(d_w = d, act = tanh)
        align    = global
    }
    output label = classify(att, 2)
}
"""

# %% [markdown]
# ## 2. Its Table III row, derived from its structure
#
# `classify` returns the row with the reasons for every value; ending a cell with it shows
# it as a table.

# %%
row = taxcompile.classify(SPEC)
assert row.row()["scoring"] == "Additive" and row.row()["query_type"] == "Self-Attentive"
row

# %% [markdown]
# ## 3. The model
#
# Keyword arguments override the generated `Config`'s fields (an unknown one is an error
# that lists them); `model.cfg` is the Config used.

# %%
torch.manual_seed(0)
model = taxcompile.build(SPEC, d=16)
print(model.cfg)
print(model)

# %% [markdown]
# ## 4. Train it
#
# The task: does the sentence contain the keyword (token 2)? Only one position matters,
# so a model that learns the task must learn to attend to it.
#
# `taxcompile.fit` takes batches `(inputs, target)`: `inputs` the keyword arguments of
# `forward()` (as `example_inputs` names them), `target` what the model's own `loss()`
# compares its output with (here the class; for a decoder, the token sequence it is fed:
# its loss shifts it by one). It trains with AdamW, a warm-up and a cosine decay,
# clipping, and evaluates the held-out batches; `checkpoint="run.pt"` would save a run that
# resumes exactly, `patience=` stop it early. The data can be a list of batches or, as
# here, a function of the step.

# %%
KEYWORD, S = 2, 12


def batch(n: int, g: torch.Generator):
    words = torch.randint(3, 32, (n, S), generator=g)
    label = torch.randint(0, 2, (n,), generator=g)
    where = torch.randint(0, S, (n,), generator=g)
    rows = label.nonzero().squeeze(1)
    words[rows, where[rows]] = KEYWORD
    return words, label, where


def training_batch(step: int):
    words, label, _ = batch(64, torch.Generator().manual_seed(step))
    return {"words": words}, label


words, label, _ = batch(256, torch.Generator().manual_seed(-1))
held_out = [({"words": words}, label)]
history = taxcompile.fit(model, training_batch, steps=150, lr=1e-2, eval_data=held_out,
                         threads=1)  # toy sizes: one thread is the fastest
print(f"loss {history.losses[0]:.3f} -> {history.losses[-1]:.3f};",
      f"held-out accuracy every 15 steps: {[round(e['accuracy'], 2) for e in history.evals]}")

words, label, where = batch(512, torch.Generator().manual_seed(1))
with torch.no_grad():
    out = model(words=words, return_attention=True)  # fit leaves the model in eval mode
accuracy = (out.output.argmax(-1) == label).float().mean().item()
print(f"held-out accuracy: {accuracy:.3f}")
assert accuracy > 0.95

# %% [markdown]
# ## 5. Where it attends
#
# `return_attention=True` gives every attention module's weights: here (B, 1, 1, S), one
# head and one query per sentence. Where the keyword is, it takes the largest weight.

# %%
a = out.attention["att"].reshape(len(words), S)  # (B, S)
print("weights of the first sentence:", [round(w, 2) for w in a[0].tolist()])
pos = label.nonzero().squeeze(1)
hit = (a[pos].argmax(-1) == where[pos]).float().mean().item()
print(f"the keyword takes the largest weight in {hit:.1%} of the sentences that have it")
assert hit > 0.95

# %% [markdown]
# ## 6. A diagram
#
# A `graphviz.Digraph` in the survey's visual language; ending a cell with it draws it
# (SVG; graphviz's `dot` does the drawing).

# %%
diagram = taxcompile.diagram(SPEC)
diagram if shutil.which("dot") else print(diagram.source)  # without graphviz: its DOT text

# %% [markdown]
# ## 7. Save and load
#
# Built models pickle with the source they were generated from, so `torch.load` works in
# a fresh process too (`weights_only=False`: the file holds a whole module, not only
# tensors); `copy.deepcopy` works as well.

# %%
buf = io.BytesIO()
torch.save(model, buf)
buf.seek(0)
again = torch.load(buf, weights_only=False)
with torch.no_grad():
    assert torch.equal(again(words=words).output, out.output)
print(f"saved and loaded: {buf.getbuffer().nbytes} bytes, the same outputs")

# %% [markdown]
# The generated code itself: `taxcompile.module(SPEC)` is the Python module
# (`Config`, `Model`, `example_inputs`), and `inspect.getsource` shows it; the command
# line writes it to a file with `taxcompile compile`.
