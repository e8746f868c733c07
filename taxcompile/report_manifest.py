"""The manifest of a report directory (``files.MANIFEST``) as a pydantic model: the files a
report wrote there (name -> SHA-256) and, while a report's renames are under way, the next
one's too (``pending``). ``files.read_manifest`` checks what it reads back against it, so
that a damaged manifest is an error naming the field rather than a directory the report
no longer recognises. Imported only by that read (pydantic stays out of the front end)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StringConstraints,
                      ValidationError)


def _inside(name: str) -> str:
    if not name or name.startswith("/") or "\\" in name or any(
            part in ("", ".", "..") for part in name.split("/")):
        raise ValueError("a file name must be a relative path inside the directory")
    return name


FileName = Annotated[str, AfterValidator(_inside)]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    written_by: Literal["taxcompile report"] = Field(alias="written by")
    files: dict[FileName, Sha256]
    pending: dict[FileName, Sha256] = Field(default_factory=dict)


def read(text: str) -> Manifest:
    """A manifest's text, checked; ``ValueError`` naming the first field refused
    (```files.index.html`: String should match pattern …``)."""
    try:
        return Manifest.model_validate_json(text)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"`{where}`: {err['msg']}" if where else err["msg"]) from None
