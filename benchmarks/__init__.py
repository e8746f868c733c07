"""Benchmarks of the generated PyTorch code against strong baselines and against the
libraries a user would pick instead, measured in the same run: ``python -m benchmarks
[--quick] [--json PATH] [--plot DIR] [--device cpu|cuda] [--dtype fp32|bf16]``.

Layout: ``harness`` (timing and peak memory), ``cases`` (one function per case, each
compiling its spec from ``benchmarks/specs/`` with the current generator; ``CASE_MODULES``
names the modules with more cases), ``peers`` (the peer rows: nn.TransformerEncoder,
x-transformers, local-attention, entmax, torch_geometric), ``__main__`` (the table, the
JSON and the plots), ``paper_size`` (every generated model at its paper's sizes).
"""
