"""``python -m taxcompile.run generated/*.py``: import each generated module, build
``Model(Config.tiny())`` and run it once on ``example_inputs`` (what ``make demo`` does
after compiling). Prints the output shape and the attention modules' weight shapes."""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path


def load_module(source: str, name: str):
    """Import generated source as a module, from memory, under a stable name
    (``taxcompile.built.<name>_<hash of source>``, see ``built``): the same source and name
    give the same module, which stays importable, so that its models pickle."""
    from . import built

    return built.load(source, name)


def main(argv: list[str] | None = None) -> int:
    import torch

    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print("usage: python -m taxcompile.run FILE.py…", file=sys.stderr)
        return 2
    failed = 0
    for path in paths:
        try:
            mod = load_module(path.read_text(encoding="utf-8"), "taxcompile_run_" + path.stem)
            cfg = mod.Config.tiny()
            torch.manual_seed(0)
            model = mod.Model(cfg)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = model(**mod.example_inputs(cfg=cfg), return_attention=True)
            ms = (time.perf_counter() - start) * 1e3
        except Exception as e:  # report every file, then fail
            print(f"{path}: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
            failed += 1
            continue
        outs = out.output if isinstance(out.output, dict) else {"output": out.output}
        shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in outs.items())
        print(f"{path}: {shapes}; {len(out.attention)} attention module(s); "
              f"{sum(p.numel() for p in model.parameters()):,} parameters at tiny sizes; {ms:.0f} ms")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
