"""Benchmarks of the generated PyTorch code against strong baselines measured in the
same run: ``python -m benchmarks [--quick] [--json PATH] [--plot PATH]``.

Layout: ``harness`` (timing and peak memory), ``cases`` (one function per case, each
compiling its spec from ``benchmarks/specs/`` with the current generator), ``__main__``
(the table, the JSON and the plot).
"""
