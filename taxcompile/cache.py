"""A cache of ``taxcompile table``'s rows: a table of specs that did not change is not
parsed, checked and classified again. A cold run spends most of its time importing the
front end (lark, the parser, checker and classifier) before it reads a spec; a row
from the cache needs none of them.

An entry is keyed by the spec's bytes, the ``--reading``, and a fingerprint of all that
could change a row: the front end's sources (``taxcompile/*.py``, the grammar), the
installed lark and networkx (the size and time of their files) and Python's
version. Only specs that check without errors are stored, so a spec's errors are always
reported. Entries live in ``$TAXCOMPILE_CACHE_DIR``, else ``$XDG_CACHE_HOME/taxcompile``,
else ``~/.cache/taxcompile``; ``TAXCOMPILE_NO_CACHE=1`` turns the cache off, and a cache
that cannot be read or written is ignored. Nothing here imports the front end.

Beside the rows, ``grammar/`` keeps lark's analysis of the grammar (its LALR tables, which
take lark some 0.1 s to build), one file per grammar text, parser variant, lark version and
Python version. Like Python's bytecode cache it holds no result and stays on with
``TAXCOMPILE_NO_CACHE=1``; where it cannot be written, the tables are built each run."""

from __future__ import annotations

import functools
import importlib.util
import os
import stat
import sys
from pathlib import Path

FORMAT = 1  # bump when an entry's layout changes
MAX_BYTES = 1_000_000  # parser.MAX_BYTES: a longer file is refused, never cached
MAX_ENTRIES = 2000  # beyond this, writing an entry removes the oldest half
DEPENDENCIES = ("lark", "networkx")
_PACKAGE = Path(__file__).resolve().parent


def root() -> Path | None:
    """The cache's folder (whether or not the row cache is on), or None: no home."""
    if os.environ.get("TAXCOMPILE_CACHE_DIR"):
        return Path(os.environ["TAXCOMPILE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        home = os.path.expanduser("~")
        if home.startswith("~"):  # no home directory: no cache rather than one in the cwd
            return None
        base = os.path.join(home, ".cache")
    return Path(base) / "taxcompile"


def directory() -> Path | None:
    """Where entries live, or None when the cache is off."""
    if os.environ.get("TAXCOMPILE_NO_CACHE", "") not in ("", "0"):
        return None
    where = root()
    return where / "table" if where is not None else None


def grammar_file(grammar: str, variant: str) -> str | None:
    """The file for lark's analysis of ``grammar`` (``variant``: the parser's options and
    lark's version), its folder made private to the user; None where there is no cache
    folder or it cannot be made (lark then builds its tables each run)."""
    where = root()
    if where is None:
        return None
    import hashlib

    digest = hashlib.sha256(f"{grammar}\0{variant}\0{sys.version}".encode()).hexdigest()
    folder = where / "grammar"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    return str(folder / f"attn-{digest[:40]}.lark")


def sources_digest(files: list[Path]) -> str:
    """A digest of the files' names and bytes."""
    import hashlib  # (with the cache off, a cold table needs no digest)

    h = hashlib.sha256()
    for f in files:
        data = f.read_bytes()
        h.update(f"{f.name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def subpackage_sources() -> list[Path]:
    """The sources of the front end's subpackages (the mechanism registry: a record's
    reading or reason text changes rows)."""
    return sorted((_PACKAGE / "mechanisms").glob("*.py"))


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
    """What, besides a spec, decides its row: the front end's code and its libraries."""
    grammar = [p for p in (_PACKAGE.parent / "grammar" / "attn.lark",
                           _PACKAGE / "grammar" / "attn.lark") if p.is_file()]
    parts = [f"format {FORMAT}", sys.version,
             sources_digest(sorted(_PACKAGE.glob("*.py")) + subpackage_sources() + grammar)]
    for name in DEPENDENCIES:
        spec = importlib.util.find_spec(name)  # finds the package without importing it
        origin = spec.origin if spec is not None else None
        if origin:
            st = os.stat(origin)
            parts.append(f"{name} {origin} {st.st_size} {st.st_mtime_ns}")
        else:
            parts.append(f"{name} missing")
    import hashlib

    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def key(path: Path, reading: str) -> tuple[str, bytes] | None:
    """The entry's key for the spec at ``path`` and the bytes it was computed from (load
    the spec from them, not from a second read), or None where the spec must not be
    cached (not a regular file, too large, unreadable: the front end reports those) or
    when the cache is off (no fingerprint of the sources is computed then)."""
    if directory() is None:
        return None
    import hashlib

    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
                return None
            data = f.read(MAX_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_BYTES:
        return None
    h = hashlib.sha256(f"{fingerprint()}\0{reading}\0".encode())
    h.update(data)
    return h.hexdigest(), data


def load(entry_key: str | None, columns: tuple[str, ...]) -> dict | None:
    """The stored entry, or None (no cache, no entry, an unreadable or damaged one, or a
    row without exactly ``columns``)."""
    where = directory()
    if where is None or entry_key is None:
        return None
    import json  # (not imported where the cache is off: a cold table needs none)

    try:
        entry = json.loads((where / f"{entry_key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("row"), dict) or \
            not all(isinstance(k, str) and isinstance(v, str) for k, v in entry["row"].items()) \
            or list(entry["row"]) != list(columns) \
            or not isinstance(entry.get("survey_row"), (int, type(None))):
        return None
    return entry


def store(entry_key: str | None, entry: dict) -> None:
    """Write an entry (atomically: a reader sees the whole entry or none)."""
    where = directory()
    if where is None or entry_key is None:
        return
    import json

    tmp = where / f".{entry_key}.{os.getpid()}.tmp"
    try:
        where.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(entry, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, where / f"{entry_key}.json")
        entries = list(where.glob("*.json"))
        if len(entries) > MAX_ENTRIES:  # forget the oldest half
            entries.sort(key=lambda f: f.stat().st_mtime_ns)
            for old in entries[: len(entries) - MAX_ENTRIES // 2]:
                old.unlink(missing_ok=True)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
