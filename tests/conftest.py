import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
sys.path.insert(0, str(ROOT))


def error_snapshot(name: str) -> tuple[str, str]:
    """(what `check` says about tests/data/errors/NAME.attn, the committed NAME.expected),
    paths shown relative to the repository."""
    from taxcompile.diagnostics import SpecError
    from taxcompile.pipeline import load

    errors = ROOT / "tests" / "data" / "errors"
    path = errors / f"{name}.attn"
    with pytest.raises(SpecError) as info:
        load(path)
    rendered = info.value.render().replace(str(path), path.relative_to(ROOT).as_posix())
    return rendered, (errors / f"{name}.expected").read_text(encoding="utf-8").rstrip("\n")


def classify_text(text: str, name: str = "t.attn") -> dict:
    """The Table III row dict of spec text (merged over variants)."""
    from taxcompile.pipeline import classify_spec, load_text

    return classify_spec(load_text(text, name)).row()


def cell_of(text: str, dimension: str, name: str = "t.attn") -> dict[str, list[str]]:
    """One Table III cell of the spec text's first model: {label: its reasons}."""
    from taxcompile.classification import classify_model
    from taxcompile.pipeline import load_text

    return classify_model(load_text(text, name).models[0]).cells[dimension].values


def variant_rows(text: str) -> dict:
    from taxcompile.pipeline import classify_spec, load_text

    row = classify_spec(load_text(text, "t.attn"))
    return {v.model: v.row() for v in row.variants}


@pytest.fixture
def spec_text():
    def read(name: str) -> str:
        return (SPECS / f"{name}.attn").read_text(encoding="utf-8")
    return read
