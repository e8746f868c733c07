"""Atomic file writes: an error never leaves a partial file behind."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text is UTF-8 with "\\n" line ends) to ``path`` through a temporary
    file in the same directory, keeping an existing file's permissions."""
    path = Path(path)
    created: list[Path] = []
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        _mkdirs(path.parent, created)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except BaseException:
        _rmdirs(created)
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        if path.exists():
            with contextlib.suppress(OSError):
                os.chmod(tmp, path.stat().st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _rmdirs(created)
        raise


def _rmdirs(created: list[Path]) -> None:
    """Remove the directories ``_mkdirs`` made, deepest first; one in use stays."""
    for d in reversed(created):
        with contextlib.suppress(OSError):
            d.rmdir()


def make_dirs(directory: Path, what: str) -> list[Path]:
    """``mkdir -p directory``; returns the directories made (for ``remove_dirs``). Raises
    ``OutputError`` ("WHAT DIRECTORY: why") when it cannot be made."""
    created: list[Path] = []
    try:
        _mkdirs(directory, created)
    except OSError as e:
        _rmdirs(created)
        why = "a file is in the way" if isinstance(e, (FileExistsError, NotADirectoryError)) \
            else e.strerror or str(e)
        raise OutputError(f"{what} {directory}: {why}") from None
    return created


def remove_dirs(created: list[Path]) -> None:
    """Remove directories ``make_dirs`` made, if they are still empty."""
    _rmdirs(created)


def _mkdirs(directory: Path, created: list[Path]) -> None:
    """``mkdir -p`` with the umask's permissions, noting each directory it creates."""
    missing = []
    d = directory
    while not d.is_dir():
        missing.append(d)
        if d.parent == d:
            break
        d = d.parent
    for d in reversed(missing):
        d.mkdir()
        created.append(d)


def write_all_atomic(files: dict[Path, str | bytes]) -> None:
    """Write several files, all or none: each goes to a temporary file beside its target
    first; only when every one is written are they renamed into place. On an error the
    temporary files and the directories made for them are removed again."""
    staged: list[tuple[str, Path]] = []
    created: list[Path] = []
    for path in files:
        if Path(path).is_dir():
            raise IsADirectoryError(errno.EISDIR, "a directory is in the way", str(path))
    umask = os.umask(0)
    os.umask(umask)
    try:
        for path, data in files.items():
            path = Path(path)
            try:
                _mkdirs(path.parent, created)
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            except OSError as e:  # name the file we could not write
                raise type(e)(e.errno, e.strerror, str(path)) from e
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            os.chmod(tmp, 0o666 & ~umask)
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _rmdirs(created)
        raise


# ---- outputs that hold only what taxcompile wrote ------------------------------------

MANIFEST = ".taxcompile-report"  # in a report's directory: the files that report wrote


class OutputError(Exception):
    """An output path taxcompile refuses to write: it would replace or remove what
    taxcompile did not write, or it cannot be what the command writes. The message is one
    line for the user; nothing has been written or moved."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def within(path: Path, parent: Path) -> bool:
    """``path`` is ``parent`` or inside it (both resolved)."""
    return path == parent or parent in path.parents


def _hash_of(path: Path) -> str | None:
    """The SHA-256 of a regular file (not a symbolic link), or None."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        return sha256(path.read_bytes())
    except OSError:
        return None


def _safe_name(name: object) -> bool:
    """A manifest entry: a relative path inside the directory, no `..`, no `.`."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name:
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def read_manifest(directory: Path) -> dict[str, str] | None:
    """The files a previous report wrote into ``directory`` (name -> SHA-256), or None
    when it has no valid manifest."""
    path = directory / MANIFEST
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 10_000_000:
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("written by") != "taxcompile report":
        return None
    files = doc.get("files")
    if not isinstance(files, dict) or not all(
            _safe_name(k) and isinstance(v, str) and len(v) == 64 for k, v in files.items()):
        return None
    return dict(files)


def check_site_dir(out: Path, specs: list[Path], spec_dirs: list[Path]) -> dict[str, str]:
    """Refuse a report directory that is not the report's to replace; returns the files
    the previous report wrote there (empty for a new or empty directory).

    Refused: a path that is not a directory; the current directory or one that holds it;
    a directory that holds a spec, or that is (inside) a directory of specs given as
    input; a non-empty directory without a manifest."""
    where = f"cannot write the report to {out}"
    if out.is_symlink() and not out.exists():
        raise OutputError(f"{where}: it is a broken symbolic link")
    if out.exists() and not out.is_dir():
        raise OutputError(f"{where}: it is a file, not a directory (the report is a "
                          "directory of pages: choose a new one, e.g. `-o site`)")
    real = out.resolve()
    cwd = Path.cwd().resolve()
    if real == cwd:
        raise OutputError(f"{where}: it is the current directory (write the report into a "
                          "new directory, e.g. `-o site`)")
    if within(cwd, real):
        raise OutputError(f"{where}: it holds the current directory (write the report into a "
                          "new directory, e.g. `-o site`)")
    for spec in specs:
        if within(spec.resolve(), real):
            raise OutputError(f"{where}: it holds the spec {spec} (write the report into a "
                              "new directory, e.g. `-o site`)")
    for d in spec_dirs:
        if within(real, d.resolve()):
            raise OutputError(f"{where}: it is {'' if real == d.resolve() else 'inside '}the "
                              f"input directory {d} (write the report outside the specs)")
    if not out.exists():
        return {}
    manifest = read_manifest(real)
    if manifest is None:
        try:
            empty = next(real.iterdir(), None) is None
        except OSError as e:
            raise OutputError(f"{where}: {e.strerror or e}") from None
        if not empty:
            raise OutputError(f"{where}: it is not empty and holds no earlier report (no "
                              f"{MANIFEST}); choose a new or empty directory")
        return {}
    return manifest


def write_site(out: Path, files: dict[str, str | bytes], old: dict[str, str]) -> list[Path]:
    """Write a report's ``files`` (relative names) into ``out``, all or none, with a
    manifest; replace only files that ``old`` (the previous manifest) lists, unchanged
    since; then remove what the old report had and this one has not. Returns the files
    removed. Raises ``OutputError`` (nothing written) when a file is in the way."""
    real = out.resolve()
    where = f"cannot write the report to {out}"
    data = {name: (text.encode("utf-8") if isinstance(text, str) else text)
            for name, text in files.items()}
    for name in data:
        assert _safe_name(name) and name != MANIFEST, name
        d = real
        for part in name.split("/")[:-1]:
            d = d / part
            if d.is_symlink() or (d.exists() and not d.is_dir()):
                raise OutputError(f"{where}: {out / d.relative_to(real)} is in the way "
                                  "(it is not a directory the report made)")
        target = real / name
        if target.is_symlink() or target.exists():
            if name not in old:
                raise OutputError(f"{where}: {out / name} exists and no report wrote it "
                                  "(move it away first)")
            if _hash_of(target) != old[name]:
                raise OutputError(f"{where}: {out / name} was changed since the report wrote "
                                  "it (move it away first)")
    manifest = {"written by": "taxcompile report",
                "files": {name: sha256(raw) for name, raw in sorted(data.items())}}
    writes: dict[Path, bytes] = {real / name: raw for name, raw in data.items()}
    writes[real / MANIFEST] = (json.dumps(manifest, indent=1) + "\n").encode("utf-8")
    try:
        write_all_atomic(writes)
    except OSError as e:
        raise OutputError(f"{where}: " + (f"{e.filename}: " if e.filename else "")
                          + f"{e.strerror or e} (nothing written)") from None
    removed = []
    for name, digest in sorted(old.items()):
        if name in data:
            continue
        target = real / name
        parents = target.relative_to(real).parents
        if any((real / p).is_symlink() for p in parents if str(p) != "."):
            continue
        if _hash_of(target) == digest:  # only what the old report wrote, unchanged
            with contextlib.suppress(OSError):
                target.unlink()
                removed.append(out / name)
                for p in target.parents:  # directories the old report made, now empty
                    if p == real:
                        break
                    try:
                        p.rmdir()
                    except OSError:
                        break
    return removed
