"""A diagram's file: the mark every diagram carries (``MARK``, with the SHA-256 of the file),
how it is sealed into each format, and how ``diagram -o FILE`` knows a file it may replace
(``is_diagram``) and writes it (``check_target``, ``write``)."""

from __future__ import annotations

import hashlib
import re
import zlib
from pathlib import Path

from .files import OutputError, read_regular, write_atomic

FORMATS = ("svg", "png", "pdf", "dot")

# Every diagram carries this mark (a graph comment in .dot and .svg, a tEXt chunk in
# .png, a comment line in .pdf) with the SHA-256 of the file as written with the mark's
# hash zeroed: `diagram -o FILE` replaces a diagram it drew, unchanged since, and refuses
# any other file, one that merely contains the words included.
MARK = "taxcompile diagram sha256="
ZEROS = "0" * 64
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_TEXT = b"tEXt" + b"Software\0"  # the chunk's type and keyword before the mark
MAX_DIAGRAM_BYTES = 64_000_000  # a larger file is no diagram of ours


def _png_chunk(mark: bytes) -> bytes:
    body = _PNG_TEXT + mark
    return (len(body) - 4).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")


def marked(fmt: str, data: bytes) -> bytes:
    """Rendered output with the mark added where the format keeps comments (the graph
    comment already carries it in .dot and .svg), its hash still zero."""
    mark = (MARK + ZEROS).encode()
    if fmt == "png" and data.startswith(PNG_SIGNATURE):
        end = 8 + 12 + int.from_bytes(data[8:12], "big")  # after the IHDR chunk
        return data[:end] + _png_chunk(mark) + data[end:]
    if fmt == "pdf":
        # a comment just before `startxref` moves no object that the xref table locates
        i = data.rfind(b"startxref")
        if i >= 0:
            return data[:i] + b"%" + mark + b"\n" + data[i:]
    return data


def _with_hash(fmt: str, data: bytes, digest: str) -> bytes:
    """``data`` with its (first) mark's hash replaced by ``digest`` (a PNG chunk's CRC
    follows it); the same bytes when ``data`` has no mark."""
    i = data.find(MARK.encode())
    if i < 0:
        return data
    j = i + len(MARK)
    out = data[:j] + digest.encode() + data[j + 64:]
    if fmt == "png":
        body = _PNG_TEXT + out[i:j + 64]
        if out[i - len(_PNG_TEXT):i] == _PNG_TEXT:
            out = out[:j + 64] + zlib.crc32(body).to_bytes(4, "big") + out[j + 68:]
    return out


def sealed(fmt: str, data: bytes) -> bytes:
    """Marked output with the mark's hash filled in."""
    return _with_hash(fmt, data, hashlib.sha256(data).hexdigest())


def is_diagram(path: Path) -> bool:
    """Whether ``path`` is a diagram taxcompile drew, unchanged since: a regular file whose
    mark holds the hash of its bytes with that hash zeroed."""
    fmt = path.suffix.lstrip(".").lower()
    data = read_regular(path, MAX_DIAGRAM_BYTES + 1)
    if data is None or len(data) > MAX_DIAGRAM_BYTES or fmt not in FORMATS:
        return False
    i = data.find(MARK.encode())
    digest = data[i + len(MARK):i + len(MARK) + 64].decode("ascii", "replace")
    if i < 0 or not re.fullmatch(r"[0-9a-f]{64}", digest):
        return False
    return hashlib.sha256(_with_hash(fmt, data, ZEROS)).hexdigest() == digest


def check_target(out: Path) -> None:
    """Refuse to write over anything but a diagram drawn before (nothing written yet)."""
    where = f"cannot write the diagram to {out}"
    if out.is_dir():
        raise OutputError(f"{where}: it is a directory (name the file, e.g. "
                          f"`-o {out / 'model.svg'}`)")
    if out.is_symlink() or out.exists():
        if out.is_symlink() or not out.is_file():
            raise OutputError(f"{where}: it is not a regular file")
        if not is_diagram(out):
            raise OutputError(f"{where}: the file exists and is not a diagram taxcompile "
                              "drew (move it away, or choose another name)")


def write(out: Path, data: bytes) -> None:
    try:
        write_atomic(out, data)
    except OSError as e:
        raise OutputError(f"cannot write the diagram to {out}: {e.strerror or e}") from None
