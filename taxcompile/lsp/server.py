"""The server: pygls wiring, one cached analysis per document, debounced diagnostics, and
a guard around every handler so that a half-typed document never takes the server down
(an internal error is logged to the client and the request answered with nothing)."""

from __future__ import annotations

import asyncio
import functools
import traceback

from lsprotocol import types as t
from pygls.server import LanguageServer

from .. import __version__
from . import edits, features, navigation, units
from .analysis import Analysis, analyse

DEBOUNCE_S = 0.03  # edits closer than this are checked once, after the last


class AttnServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("taxcompile", __version__)
        self.cache: dict[str, Analysis] = {}
        self.good: dict[str, Analysis] = {}  # the last analysis that checked (axis names)
        self.pending: dict[str, int] = {}

    def analysis(self, uri: str) -> Analysis:
        text = self.workspace.get_text_document(uri).source
        a = self.cache.get(uri)
        if a is None or a.text != text:
            a = self.cache[uri] = analyse(text, uri.rsplit("/", 1)[-1])
            if a.checked is not None:
                self.good[uri] = a
        return a

    def publish(self, uri: str) -> None:
        a = self.analysis(uri)
        self.publish_diagnostics(uri, self.out(a, edits.diagnostics(a)))

    @property
    def encoding(self) -> str:
        return self.workspace.position_encoding or t.PositionEncodingKind.Utf16

    def at(self, uri: str, pos: t.Position) -> tuple[Analysis, int, int]:
        """The document's analysis and ``pos`` as (line, character index)."""
        a = self.analysis(uri)
        lines = a.text.split("\n")
        line = lines[pos.line] if 0 <= pos.line < len(lines) else ""
        return a, pos.line, units.to_chars(line, pos.character, self.encoding)

    def out(self, a: Analysis, answer):
        """``answer``'s positions in the client's units (they are characters until here)."""
        return units.outgoing(answer, a.text.split("\n"), self.encoding)


server = AttnServer()


def guarded(fn):
    """Run handler ``fn``; log an internal error instead of raising it."""
    if asyncio.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def run_async(*args):
            try:
                return await fn(*args)
            except Exception:  # noqa: BLE001 - the server must outlive any document
                _log(traceback.format_exc())
                return None
        return run_async

    @functools.wraps(fn)
    def run(*args):
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001
            _log(traceback.format_exc())
            return None
    return run


def _log(text: str) -> None:
    server.show_message_log(f"taxcompile lsp: internal error\n{text}", t.MessageType.Error)


@server.feature(t.TEXT_DOCUMENT_DID_OPEN)
@guarded
def did_open(ls: AttnServer, params: t.DidOpenTextDocumentParams) -> None:
    ls.publish(params.text_document.uri)


@server.feature(t.TEXT_DOCUMENT_DID_CHANGE)
@guarded
async def did_change(ls: AttnServer, params: t.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    ticket = ls.pending[uri] = ls.pending.get(uri, 0) + 1
    await asyncio.sleep(DEBOUNCE_S)
    if ls.pending.get(uri) == ticket:
        ls.publish(uri)


@server.feature(t.TEXT_DOCUMENT_DID_CLOSE)
@guarded
def did_close(ls: AttnServer, params: t.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    for table in (ls.cache, ls.good, ls.pending):
        table.pop(uri, None)
    ls.publish_diagnostics(uri, [])


@server.feature(t.TEXT_DOCUMENT_HOVER)
@guarded
def hover(ls: AttnServer, p: t.HoverParams):
    a, line, col = ls.at(p.text_document.uri, p.position)
    return ls.out(a, features.hover(a, line, col))


@server.feature(t.TEXT_DOCUMENT_COMPLETION, t.CompletionOptions(trigger_characters=["=", "(", " "]))
@guarded
def completion(ls: AttnServer, p: t.CompletionParams):
    uri = p.text_document.uri
    a, line, col = ls.at(uri, p.position)
    return ls.out(a, features.completion(a, ls.good.get(uri), line, col))


@server.feature(t.TEXT_DOCUMENT_DEFINITION)
@guarded
def definition(ls: AttnServer, p: t.DefinitionParams):
    uri = p.text_document.uri
    a, line, col = ls.at(uri, p.position)
    return ls.out(a, navigation.definition(a, uri, line, col))


@server.feature(t.TEXT_DOCUMENT_REFERENCES)
@guarded
def references(ls: AttnServer, p: t.ReferenceParams):
    uri = p.text_document.uri
    a, line, col = ls.at(uri, p.position)
    return ls.out(a, navigation.references(a, uri, line, col))


@server.feature(t.TEXT_DOCUMENT_RENAME)
@guarded
def rename(ls: AttnServer, p: t.RenameParams):
    uri = p.text_document.uri
    a, line, col = ls.at(uri, p.position)
    return ls.out(a, navigation.rename(a, uri, line, col, p.new_name))


@server.feature(t.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
@guarded
def symbols(ls: AttnServer, p: t.DocumentSymbolParams):
    a = ls.analysis(p.text_document.uri)
    return ls.out(a, navigation.symbols(a))


@server.feature(t.TEXT_DOCUMENT_FORMATTING)
@guarded
def formatting(ls: AttnServer, p: t.DocumentFormattingParams):
    return edits.formatting(ls.workspace.get_text_document(p.text_document.uri).source)


@server.feature(t.TEXT_DOCUMENT_CODE_ACTION)
@guarded
def code_action(ls: AttnServer, p: t.CodeActionParams):
    # the diagnostics' ranges came from publish() in the client's units already
    return edits.code_actions(p.text_document.uri, p.context.diagnostics)


@server.feature(t.TEXT_DOCUMENT_CODE_LENS)
@guarded
def code_lens(ls: AttnServer, p: t.CodeLensParams):
    a = ls.analysis(p.text_document.uri)
    return ls.out(a, edits.lenses(a))


def main() -> int:
    server.start_io()
    return 0
