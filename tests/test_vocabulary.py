"""The shared word lists (taxcompile/vocabulary.py): complete against the grammar and the
registry, the TextMate grammar committed as generated, and both highlighters use them."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pygments.token import Name

from taxcompile import mechanisms, parser
from taxcompile.lexer import AttnLexer
from taxcompile.vocabulary import textmate, vocabulary

ROOT = Path(__file__).resolve().parent.parent
VSCODE = ROOT / "editors" / "vscode"
TM = VSCODE / "syntaxes" / "attn.tmLanguage.json"
SPECS = sorted((ROOT / "specs").glob("*.attn"))
# Every name the registry gives a mechanism written as a field's value or a call, aliases
# included, read from the registry itself (the "trait" and "query" kinds are field names).
VALUE_KINDS = ("score", "align", "position", "bias", "mask", "heads_out", "penalty")
REGISTRY_NAMES = sorted({n for (k, _), m in mechanisms.REGISTRY.items() if k in VALUE_KINDS
                         for n in (m.name, *m.aliases)})


def test_every_grammar_keyword_is_in_the_vocabulary():
    # lark's own terminals, not the regex vocabulary.py reads the grammar with
    keywords = set(parser._keywords().values())
    assert keywords and keywords <= set(vocabulary().keywords)


def test_vocabulary_has_every_registry_name():
    assert set(REGISTRY_NAMES) <= set(vocabulary().registry_names())


def test_lexer_highlights_every_registry_name():
    for name in REGISTRY_NAMES:
        kind = next(k for (k, _), m in mechanisms.REGISTRY.items()
                    if k in VALUE_KINDS and name in (m.name, *m.aliases))
        tokens = list(AttnLexer().get_tokens(f"attention a {{ {kind} = {name} }}\n"))
        assert (Name.Builtin, name) in tokens, (name, tokens)


def test_textmate_grammar_is_generated():
    assert json.loads(TM.read_text()) == textmate(), (
        "regenerate: python -m taxcompile.vocabulary --textmate > " + str(TM.relative_to(ROOT)))
    out = subprocess.run([sys.executable, "-m", "taxcompile.vocabulary", "--textmate"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out == TM.read_text()


def _registry_uses(path):
    """(line, col, name) of each registry name a spec uses as a mechanism: after a field's
    `=` or called with `(`."""
    names = "|".join(sorted(map(re.escape, REGISTRY_NAMES), key=len, reverse=True))
    pat = re.compile(r"(?:=\s*|(?<![A-Za-z0-9_]))(" + names + r")(?![A-Za-z0-9_])(\s*\()?")
    uses = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        code = line.split("#", 1)[0]
        for m in pat.finditer(code):
            if m.group(0).startswith("=") or m.group(2):
                uses.append((i, m.start(1) + 1, m.group(1)))
    return uses


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_textmate_scopes_every_registry_name_in_the_specs():
    if not (VSCODE / "node_modules" / "vscode-textmate").exists():
        pytest.skip("the extension's node modules are not installed (make vscode)")
    out = subprocess.run(["node", "test/tokenize.js", *map(str, SPECS)], cwd=VSCODE,
                         capture_output=True, text=True, timeout=20, check=True).stdout
    tokens = {}
    for row in map(json.loads, out.splitlines()):
        tokens[(row["file"], row["line"], row["col"])] = (row["text"], row["scopes"])
    checked = 0
    for path in SPECS:
        for line, col, name in _registry_uses(path):
            text, scopes = tokens.get((str(path), line, col), ("", [""]))
            assert text == name and scopes[-1].startswith("support.function"), (
                path.name, line, col, name, scopes)
            checked += 1
    assert checked > 50
