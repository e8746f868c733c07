"""The GPU proof kit, ``python -m benchmarks.gpu`` (``make gpu-check``): one command that
shows on one CUDA device that the generated modules are correct there and how fast they are
against their peers, each stage under a hard time budget (a child process, killed when its
budget runs out). It writes gpu-report.json and gpu-report.md. On a machine without CUDA
(``--device cpu``) it runs the same stages at small sizes, which is how CI keeps it working.

Layout: ``stages`` (the budgeted child processes), ``models`` (every model of specs/ and
examples/), ``correctness``, ``kernels``, ``speed`` and ``throughput`` (the stages),
``report`` (the Markdown), ``__main__`` (the command). See docs/gpu.md.
"""
