"""taxcompile: a taxonomy-driven compiler for attention models.

Pipeline: parser (text -> AST) -> lower (AST -> IR) -> checks (names, cycles, shapes)
-> graph (networkx) -> classify (Table III) -> table. The front end never imports torch.
"""

__version__ = "0.1.0"
