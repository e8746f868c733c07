"""taxcompile/reserved_names.py holds what reserved.py reads off the code templates (read
once, when a template changes, not on every `check`): it must equal what the templates
give now. A template that defines a new helper fails here until the store is written
again with `python -m taxcompile.reserved`."""

from __future__ import annotations

from taxcompile import reserved


def test_the_stored_names_are_the_templates():
    derived = reserved.derive()
    stored = {k: reserved._stored(k) for k in derived}
    assert stored == derived, (
        "taxcompile/reserved_names.py is stale: run `python -m taxcompile.reserved`; "
        + "; ".join(f"{k}: +{sorted(derived[k] - stored[k])} -{sorted(stored[k] - derived[k])}"
                    for k in derived if derived[k] != stored[k]))


def test_a_new_template_helper_is_noticed(tmp_path, monkeypatch):
    """The check can fail: a template with one more top-level helper gives another set."""
    real = reserved._templates()
    monkeypatch.setattr(reserved, "_templates",
                        lambda: real + (("extra.py.j2", "def fresh_helper(x):\n    return x\n"),))
    derived = reserved.derive()
    assert "fresh_helper" in derived["module_names"]
    assert "fresh_helper" not in reserved._stored("module_names")
    out = tmp_path / "names.py"
    reserved.write_store(out)
    ns: dict = {}
    exec(out.read_text(encoding="utf-8"), ns)  # the written store reads back as derived
    assert ns["NAMES"] == derived
