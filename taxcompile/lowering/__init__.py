"""Stage 2, lowering (AST -> IR), by concern. ``taxcompile.lower`` is the stage's entry
point: its ``Lowerer`` joins the parts below and lowers the spec model by model.

- ``base``: the state of a lowering (the spec's budget, the model being lowered, the
  statement being defined), the error reporter and the identifier rule;
- ``names``: scopes, name binding and resolution (``x``, ``block[2].x``, ``att.weights``);
- ``constants``: constant arithmetic (``let``), its Config text, and the checking of a
  parameter's value against its type (``ops.P``: int, float, probability, enum, act);
- ``spec``: the ``paper`` block and the merging of a variant into its base;
- ``inputs``: ``input`` statements (kinds, axes, options);
- ``features``: feature expressions and feature-model calls (``ops.CALLS``), decoders'
  named parameters (``feed``, ``init``, ``share``, ``tie``) included;
- ``attention``: ``attention`` statements, reading the mechanism registry
  (``taxcompile/mechanisms``) for the score, alignment, position term, bias and mask;
- ``penalties``: the ``penalty`` field (the penalties' records say where each lowers to);
- ``repeats``: ``repeat`` blocks, unrolled hop by hop (``relabel``: a hop after the
  second is the one before it with its node ids re-labelled, where that is provably so).

What is checked where. Lowering reports what one statement shows on its own, read
against the names declared before it: identifiers and reserved names, unknown or repeated
fields and options, a parameter's type and range, constant arithmetic, unknown names, a
``repeat``'s hops, variants (``update`` in a variant), and the spec's node budget. A
statement that fails here does not reach the IR. Everything that needs the finished
model, its other statements or shapes (a reference to a node declared later, cycles,
shape inference, whether a mechanism fits its query and keys (the records' checks),
decoders' steps, an input's ``into`` axis, a supervised target's kind) is checked in
``checks.py`` on the IR. No module here imports torch or jinja2."""
