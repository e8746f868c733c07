"""A mechanism is data: its name in taxcompile/ is found in its registry record's module,
its templates (the class's and its helpers'), and the stores generated from them
(reserved_names.py, which `python -m taxcompile.reserved` writes off the templates), and
nowhere else: no reader, codegen or table that knows it by name. Checked for the mechanisms
added as records alone (sigmoid attention, differential attention, LightConv)."""
from pathlib import Path

import pytest

from taxcompile import mechanisms as mech

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "taxcompile"
TEMPLATES = PKG / "templates" / "codegen"
# Written by a command from the templates and records, each saying so in its first line
GENERATED = {PKG / "reserved_names.py"}
NEW = [("align", "sigmoid_attn"), ("align", "lightconv"), ("trait", "differential")]


def _files():
    for p in sorted(PKG.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".j2", ".lark",
                                                                       ".json", ".md", ".txt"):
            yield p


def _mentions(name: str, files=None) -> set[Path]:
    """The files (those under taxcompile/ by default) whose text holds ``name``
    (case-insensitive: a reason's "LightConv" counts)."""
    return {p for p in (_files() if files is None else files)
            if name.lower() in p.read_text(errors="replace").lower()}


def _allowed(rec) -> set[Path]:
    """Its record's module (the one registry module that holds the record), its templates
    and the generated stores."""
    home = {p for p in (PKG / "mechanisms").glob("*.py")
            if f'"{rec.kind}", "{rec.name}"' in p.read_text()}
    assert len(home) == 1, home
    templates = {TEMPLATES / rec.template, *(TEMPLATES / "helpers" / f"{h}.py.j2"
                                             for h in (*rec.helpers, *rec.query_helpers))}
    return home | templates | GENERATED


@pytest.mark.parametrize("kind,name", NEW, ids=[n for _, n in NEW])
def test_a_new_mechanism_is_named_only_by_its_record_and_templates(kind, name):
    rec = mech.REGISTRY[(kind, name)]
    stray = _mentions(name) - _allowed(rec)
    assert not stray, (f"`{name}` is named outside its record and templates: "
                       + ", ".join(str(p.relative_to(ROOT)) for p in sorted(stray)))


def test_the_check_sees_a_mention_outside_the_record(tmp_path):
    """A module that words a reason with the mechanism's name is reported; its record's
    module is not."""
    rec = mech.REGISTRY[("align", "lightconv")]
    stray = tmp_path / "reader.py"
    stray.write_text('WHY = "LightConv, local by construction"\n')
    files = [stray, *_allowed(rec)]
    assert _mentions("lightconv", files) - _allowed(rec) == {stray}
