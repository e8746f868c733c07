"""Atomic file writes: an error never leaves a partial file behind."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text is UTF-8 with "\\n" line ends) to ``path`` through a temporary
    file in the same directory, keeping an existing file's permissions."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
        raise


def write_all_atomic(files: dict[Path, str]) -> None:
    """Write several files, all or none: each goes to a temporary file beside its target
    first; only when every one is written are they renamed into place."""
    staged: list[tuple[str, Path]] = []
    for path in files:
        if Path(path).is_dir():
            raise IsADirectoryError(errno.EISDIR, "a directory is in the way", str(path))
    try:
        for path, data in files.items():
            path = Path(path)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            except OSError as e:  # name the file we could not write
                raise type(e)(e.errno, e.strerror, str(path)) from e
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(data.encode("utf-8"))
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
