"""Atomic file writes: an error never leaves a partial file behind."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import tempfile
from pathlib import Path


def _tmp_prefix(path: Path) -> str:
    """A temporary file's name for ``path``: hidden, with the writer's process id, so that
    one a killed writer left is known (``clean_temps``) and one in use is not."""
    return f".{path.name}.{os.getpid()}."


_TMP = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.[A-Za-z0-9_]+\.tmp")


def clean_temps(directory: Path, names) -> list[Path]:
    """Remove the temporary files of ``names`` in ``directory`` that a writer killed before
    its rename left (their process is gone); returns them."""
    names = set(names)
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    for entry in entries:
        m = _TMP.fullmatch(entry.name)
        if m is None or m["name"] not in names or not entry.is_file(follow_symlinks=False):
            continue
        try:
            os.kill(int(m["pid"]), 0)
            continue  # its writer is alive (or another user's): leave it
        except ProcessLookupError:
            pass
        except (OSError, OverflowError):
            continue
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed


def read_regular(path: Path, limit: int) -> bytes | None:
    """At most ``limit`` bytes of ``path`` if it is a regular file, not a link; None for
    anything else. Never blocks (a FIFO) nor reads without end (a link to /dev/zero)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a directory, a FIFO, a device
            os.close(fd)
            return None
    except OSError:
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            return f.read(limit)
        except OSError:
            return None


def same_bytes(path: Path, data: bytes) -> bool:
    """``path`` is a regular file (not a link) holding exactly ``data``."""
    got = read_regular(path, len(data) + 1)
    return got is not None and got == data


# ---- a generated file that carries the hash of its own text ----------------------------

SEAL = " — sha256 "


def seal(text: str) -> str:
    """``text`` (first line a header) with the hash of the rest at the end of the header:
    a file that still matches its seal is one taxcompile wrote and nobody edited."""
    head, sep, rest = text.partition("\n")
    return f"{head}{SEAL}{sha256(rest.encode('utf-8'))[:16]}{sep}{rest}"


def sealed(path: Path, limit: int = 16_000_000) -> bool:
    """``path`` is a regular file whose header's seal matches the rest of it."""
    data = read_regular(path, limit + 1)
    if data is None or len(data) > limit:
        return False
    head, _, rest = data.partition(b"\n")
    digest = head.rpartition(SEAL.encode("utf-8"))[2]
    return SEAL.encode("utf-8") in head and digest == sha256(rest)[:16].encode()


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text is UTF-8 with "\\n" line ends) to ``path`` through a temporary
    file in the same directory, keeping an existing file's permissions."""
    path = Path(path)
    created: list[Path] = []
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        _mkdirs(path.parent, created)
        clean_temps(path.parent, [path.name])
        fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(path), suffix=".tmp", dir=path.parent)
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


def rewrite(path: Path, text: str) -> None:
    """Replace a spec's text as an editor saving it would (`fmt`): a read-only file is
    refused (PermissionError), a file with other hard links is written in place (a new
    file would leave the other names with the old text); else atomically, through a
    symbolic link (the link stays a link)."""
    real = path.resolve()
    st = real.stat()
    if not st.st_mode & 0o222 or not os.access(real, os.W_OK):
        raise PermissionError(errno.EACCES, "the file is read-only (nothing changed)")
    if st.st_nlink > 1:
        with open(real, "r+b") as f:
            f.write(text.encode("utf-8"))
            f.truncate()
        return
    write_atomic(real, text)


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
        if d.exists() or d.is_symlink():  # a file, or a link to nothing, where a directory goes
            raise NotADirectoryError(errno.ENOTDIR, f"{d} is in the way (it is not a directory)",
                                     str(d))
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
    by_dir: dict[Path, list[str]] = {}
    for path in files:
        by_dir.setdefault(Path(path).parent, []).append(Path(path).name)
    for d, names in by_dir.items():  # what a writer killed before its renames left
        clean_temps(d, names)
    umask = os.umask(0)
    os.umask(umask)
    try:
        for path, data in files.items():
            path = Path(path)
            try:
                _mkdirs(path.parent, created)
                fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(path), suffix=".tmp",
                                           dir=path.parent)
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


def read_manifest(directory: Path) -> dict[str, set[str]] | None:
    """The files a previous report wrote into ``directory`` (name -> the SHA-256s it may
    hold: its own, and the next report's while that one's renames were under way), or None
    when it has no manifest. A damaged one is a ``ValueError`` naming the field
    (``report_manifest.Manifest``)."""
    path = directory / MANIFEST
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 10_000_000:
            return None
        raw = path.read_bytes()
    except OSError:
        return None
    from .report_manifest import read

    try:
        doc = read(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("it is not UTF-8 text") from None
    out = {name: {digest} for name, digest in doc.files.items()}
    for name, digest in doc.pending.items():
        out.setdefault(name, set()).add(digest)
    return out


def check_site_dir(out: Path, specs: list[Path], spec_dirs: list[Path]) -> dict[str, set[str]]:
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
    try:
        manifest = read_manifest(real)
    except ValueError as e:
        raise OutputError(f"{where}: its {MANIFEST}, the list of what an earlier report wrote "
                          f"there, is damaged ({e}); choose a new or empty directory") from None
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


def check_unchanged(out: Path, old: dict[str, set[str]]) -> None:
    """Refuse, before a report's slow part, a site whose files the user changed since the
    last report wrote them (``write_site`` checks again as it writes)."""
    real = out.resolve()
    for name in sorted(old):
        target = real / name
        if (target.is_symlink() or target.exists()) and _hash_of(target) not in old[name]:
            raise OutputError(f"cannot write the report to {out}: {out / name} was changed "
                              "since the report wrote it (move it away first)")


def write_site(out: Path, files: dict[str, str | bytes], old: dict[str, set[str]]) -> list[Path]:
    """Write a report's ``files`` (relative names) into ``out``, all or none, with a
    manifest; replace only files that ``old`` (the previous manifest) lists, unchanged
    since; then remove what the old report had and this one has not. Returns the files
    removed. Raises ``OutputError`` (nothing written) when a file is in the way.

    The renames are not one step: before them the manifest lists the new files' hashes as
    pending too, so that a report killed between two renames leaves a site whose every
    file the manifest accounts for, which the next report replaces."""
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
            if _hash_of(target) not in old[name]:
                raise OutputError(f"{where}: {out / name} was changed since the report wrote "
                                  "it (move it away first)")
    manifest = {"written by": "taxcompile report",
                "files": {name: sha256(raw) for name, raw in sorted(data.items())}}
    now = {name: _hash_of(real / name) for name in sorted(old)}  # the old files as they are
    journal = {"written by": "taxcompile report",
               "files": {name: h for name, h in now.items() if h in old[name]},
               "pending": manifest["files"]}
    try:
        write_atomic(real / MANIFEST, json.dumps(journal, indent=1) + "\n")
        write_all_atomic({real / name: raw for name, raw in data.items()})
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
        if _hash_of(target) in digest:  # only what the old report wrote, unchanged
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
    write_atomic(real / MANIFEST, json.dumps(manifest, indent=1) + "\n")  # the commit
    return removed
