"""The operator families: each module holds, for its operators, the ``OPS`` records
(parameters, diagram label), the shape rule the checker runs and the plan rule codegen runs,
set in the record itself. ``taxcompile.ops`` lists them in the registry (its ``FAMILIES``).

- ``blocks``: ``norm`` (layer norm, RMSNorm), ``ffn`` (with SwiGLU / GEGLU), ``prepend``
  (learned vectors before the first position: a CLS token, registers);
- ``location``: fixed location weights (Tang et al. 2016, Sukhbaatar et al. 2015);
- ``broadcast``: ``+ - *`` between features of different shapes;
- ``feature_ops``: ``split`` and ``cnn`` (groups, separable);
- ``crf_output``: ``crf(x, tags)``, a linear-chain CRF output layer, and what the checker
  asks of a structured attention's weights.

``record`` is the vocabulary the records are written in. A family imports neither the
checker nor codegen (both read it): a shape rule gets the checker as ``self`` and builds
``shapes.Shape``; a plan rule gets the planner as ``p`` and builds with ``p.kit``
(``codegen/kit.py``). No torch here (the front end)."""
