"""A half-typed document never takes the server down: the spec property test's mutants
(tests/test_properties.py) replayed as edits of one open document, each answered with the
diagnostics ``check`` gives (same lines, columns, messages and hints), and a hover,
completion, symbols and lens request on each answered without an error.

``LSP_MUTANTS=1000`` runs the long profile (`make fuzz`)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings

pytest.importorskip("pygls")

from lsp_client import Client  # noqa: E402
from test_lsp import check_errors, served  # noqa: E402
from test_properties import COMMON, mutants  # noqa: E402

URI = "file:///work/mutant.attn"
EXAMPLES = int(os.environ.get("LSP_MUTANTS", "80"))  # the suite's time; make fuzz: 1,000


@pytest.fixture(scope="module")
def client():
    c = Client()
    c.open(URI, "")
    yield c
    c.close()


def test_mutants_replayed_as_edits_never_crash_and_match_check(client):
    texts: set[str] = set()

    @settings(max_examples=EXAMPLES, **COMMON)
    @given(mutants())
    def replay(case):
        name, text = case
        texts.add(text)
        got = served(client.change(URI, text))
        assert got == check_errors(text, "mutant.attn"), name
        lines = text.split("\n")
        mid = len(lines) // 2
        col = len(lines[mid]) // 2
        client.at("textDocument/hover", URI, mid, col)
        client.at("textDocument/completion", URI, mid, col)
        client.at("textDocument/definition", URI, mid, col)
        client.request("textDocument/documentSymbol", {"textDocument": {"uri": URI}})
        client.request("textDocument/codeLens", {"textDocument": {"uri": URI}})
        assert client.alive()

    replay()
    print(f"{len(texts)} distinct mutants replayed")
    assert len(texts) >= EXAMPLES // 2
    assert client.alive()
    assert client.logs == [], client.logs[:1]  # no handler raised
