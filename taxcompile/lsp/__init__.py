"""``taxcompile lsp``: a language server for ``.attn`` specs over stdio (pygls). Every
answer comes from the compiler: diagnostics from the checker, hovers and completions from
the mechanism registry, lenses from the classifier, formatting from ``fmt``."""
