"""What `compile` may replace or remove in its output directory: only what taxcompile
wrote. A generated model file names its spec in its first line; a drop-in layer file
(`compile --layer`) also carries the hash of its own text (``files.seal``), so that a
hand-edited one, or any file that merely starts with the header, is not taxcompile's.

Every read here is of a regular file, bounded (``files.read_regular``): a FIFO or a link
to /dev/zero named ``*.py`` in the directory neither blocks nor fills the memory."""

from __future__ import annotations

import re
from pathlib import Path

from . import codegen
from .files import read_regular, same_bytes, sealed

LAYER_TITLE = re.compile(r'^"""Attention `([\w.\[\]]+)` of model `(\w+)` ', re.M)
HEAD_BYTES = 4096  # a generated file's first line is shorter


def generated_from(path: Path) -> str | None:
    """The spec a generated file names in its first line (a regular file only), or None."""
    data = read_regular(path, HEAD_BYTES)
    if data is None:
        return None
    first = data.split(b"\n", 1)[0].decode("utf-8", "replace")
    if not first.startswith(codegen.HEADER):
        return None
    return first[len(codegen.HEADER):].split(" — ")[0].strip()


def is_current(path: Path, text: str) -> bool:
    """``path`` holds exactly ``text`` (a regular file, not a link)."""
    return same_bytes(path, text.encode("utf-8"))


def unambiguous(path: Path) -> bool:
    """Whether the header of ``path``'s outputs names this spec alone: a spec inside the
    working directory is named by its path from there; one outside by its file name only,
    which another spec of that name shares (``codegen.source_name``)."""
    try:
        path.resolve().relative_to(Path.cwd().resolve())
        return True
    except ValueError:
        return False


def orphans(out_dir: Path, files: dict[Path, str], results) -> tuple[list[Path], list[Path]]:
    """The ``*.py`` files of ``out_dir`` that these specs wrote before and no model
    produces now: (those to remove, those whose spec is named by its file name only, which
    are left with a note: another spec of that name may have written them)."""
    sources = {codegen.safe_source(codegen.source_name(p)): (p, cs) for p, _, cs in results}
    remove, doubtful = [], []
    for f in sorted(out_dir.glob("*.py")):
        if f in files:
            continue
        source = generated_from(f)
        if source not in sources:
            continue
        path, cs = sources[source]
        if not f.name.startswith(f"{cs.spec.paper.id}_"):  # another paper's file
            continue
        (remove if unambiguous(path) else doubtful).append(f)
    return remove, doubtful


def layer_text(cs, cm, name: str, path) -> str:
    """A drop-in layer file's text (sealed: ``layer.generate``)."""
    from .codegen import layer

    return layer.generate(cs, cm, name, codegen.source_name(path))


def layer_goldens(out_dir: Path, results) -> tuple[dict[Path, str], list[tuple[Path, str]]]:
    """The drop-in layer files under OUT/layers/ written from these specs (their first line
    names the spec, their docstring the statement and model), each with the text the spec
    gives now; and the ones whose statement is gone, with why."""
    from .codegen import layer

    by_source = {codegen.safe_source(codegen.source_name(p)): (p, cs) for p, _, cs in results}
    texts: dict[Path, str] = {}
    gone: list[tuple[Path, str]] = []
    for f in sorted((out_dir / "layers").glob("*.py")):
        source = generated_from(f)
        if source not in by_source:
            continue
        path, cs = by_source[source]
        data = read_regular(f, 16_000_000)
        m = LAYER_TITLE.search(data.decode("utf-8", "replace")) if data is not None else None
        cm = next((c for c in cs.models if m and c.model.name == m.group(2)), None)
        if m is None or cm is None:
            gone.append((f, f"no model of {source} produces this layer any more"))
            continue
        try:
            texts[f] = layer_text(cs, cm, m.group(1), path)
        except layer.LayerError as e:
            gone.append((f, f"{source} gives no such layer any more: {e}"))
    return texts, gone


def not_ours(f: Path, layer_file: bool = False) -> str | None:
    """Why ``f``, which exists, is not taxcompile's to replace; None when it is (or when
    there is nothing there)."""
    if not f.is_symlink() and (not f.exists() or f.is_dir()):
        return None  # nothing there; a directory in the way is refused by the write itself
    if f.is_symlink() or not f.is_file():
        return "it is not a regular file"
    if layer_file:
        return None if sealed(f) else ("it exists and is not a layer taxcompile wrote, or it "
                                       "was edited since")
    return None if generated_from(f) is not None else "it exists and taxcompile did not generate it"
