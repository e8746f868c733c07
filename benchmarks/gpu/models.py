"""Every model of specs/ and examples/, compiled in memory with the current generator (or
generated files named on the command line), with the features the report counts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from taxcompile import codegen, pipeline, run

ROOT = Path(__file__).resolve().parents[2]
SPEC_DIRS = ("specs", "examples")
SPARSE = ("sparsemax", "entmax", "topk")
MASKABLE = ("tokens", "sequence", "set", "pointers")


@dataclass
class Entry:
    name: str  # the generated file's stem
    spec: str  # where it came from
    module: object  # the imported generated module
    features: list[str] = field(default_factory=list)
    aligns: list[str] = field(default_factory=list)  # the alignment functions it uses


def features(cm) -> list[str]:
    """What the report counts: masks, position terms, sparse alignments, graph attention."""
    m = cm.model
    out = []
    if any(i.kind in MASKABLE or i.kind == "mask" for i in m.inputs):
        out.append("mask")
    if any(a.position is not None or a.bias is not None for a in m.attentions):
        out.append("position")
    if any(a.align.fn in SPARSE for a in m.attentions):
        out.append("sparse")
    if any(i.kind == "graph" for i in m.inputs):
        out.append("graph")
    return out


def spec_entries(paths: list[Path]) -> list[Entry]:
    out = []
    for path in paths:
        cs = pipeline.load(path)
        rel = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
        for cm in cs.models:
            stem = codegen.output_name(cs, cm)[: -len(".py")]
            mod = run.load_module(codegen.generate(cs, cm, str(rel)), f"gpu_check_{stem}")
            out.append(Entry(stem, str(rel), mod, features(cm),
                             sorted({a.align.fn for a in cm.model.attentions})))
    return out


def file_entry(path: Path) -> Entry:
    """A generated .py file, as it is (a hand-edited one included)."""
    mod = run.load_module(path.read_text(encoding="utf-8"), f"gpu_check_file_{path.stem}")
    return Entry(path.stem, str(path), mod, [])


_CACHE: dict = {}


def entries(named: list[str] | None = None) -> list[Entry]:
    """The models named (``.attn`` specs, generated ``.py`` files, folders of specs), or
    every model of specs/ and examples/; compiled once per process (a forked stage inherits
    what its parent compiled)."""
    key = tuple(named or ())
    if key not in _CACHE:
        _CACHE[key] = _entries(named)
    return _CACHE[key]


def _entries(named: list[str] | None) -> list[Entry]:
    if not named:
        return spec_entries([p for d in SPEC_DIRS for p in sorted((ROOT / d).glob("*.attn"))])
    out = []
    for name in named:
        p = Path(name)
        if p.is_dir():
            out += spec_entries(sorted(p.glob("*.attn")))
        elif p.suffix == ".py":
            out.append(file_entry(p))
        else:
            out += spec_entries([p])
    return out
