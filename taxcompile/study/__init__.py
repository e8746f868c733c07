"""``taxcompile study``: every attention mechanism trained under one protocol on synthetic
tasks with gold alignments, its effect measured per taxonomy dimension.

Stages: ``tasks`` (seeded generators with gold links), ``models`` (the taxonomy slice and
user specs), ``protocol`` (frozen settings and profiles), ``plan`` (runs and skips),
``runner`` (one run trained as a batched ensemble), ``measures`` (survey §4's attention
evaluation). ``runs`` is the contract the store, engines and report build on."""
