"""`amplint server` end to end: the real server in a subprocess, pygls's language client speaking LSP
to it over stdio, as an editor does."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.lsp.client import LanguageClient
from support import HAZARD, HAZARD_CODE, HAZARD_FIXED, write

# A non-BMP character before the finding on its line: LSP counts UTF-16 units, amplint code points.
WIDE = "import torch\n\n\ndef f():\n    s = '\U0001d538'; scaler = torch.cuda.amp.GradScaler()\n    return s, scaler\n"
# Characters of one, two, three and four UTF-8 bytes (one or two UTF-16 units) before the finding,
# in a file whose coding cookie says latin-1, which can encode none of the last three.
MIXED = (
    "# -*- coding: latin-1 -*-\nimport torch\n\n\ndef f():\n"
    "    s = 'café € 😀 中文'; scaler = torch.cuda.amp.GradScaler()\n    return s, scaler\n"
)
ENCODINGS = {"utf-8": "utf-8", "utf-16": "utf-16-le", "utf-32": "utf-32-le"}


async def _session(
    root: Path, text: str, uri_name: str = "model.py", offered: list[str] | None = None
) -> dict:
    client = LanguageClient("amplint-test", "1")
    published: asyncio.Queue[types.PublishDiagnosticsParams] = asyncio.Queue()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def _diagnostics(params: types.PublishDiagnosticsParams) -> None:
        published.put_nowait(params)

    await client.start_io(sys.executable, "-m", "amplint", "server", cwd=str(root))
    try:
        general = None if offered is None else types.GeneralClientCapabilities(position_encodings=offered)
        result = await client.initialize_async(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(general=general), root_uri=root.as_uri()
            )
        )
        client.initialized(types.InitializedParams())
        uri = (root / uri_name).as_uri()
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
            )
        )
        opened = await published.get()
        everything = types.Range(
            start=types.Position(line=0, character=0), end=types.Position(line=99, character=0)
        )
        actions = await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=everything,
                context=types.CodeActionContext(diagnostics=opened.diagnostics),
            )
        )
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text="x = 1\n")],
            )
        )
        changed = await published.get()
        await client.shutdown_async(None)
        client.exit(None)
        return {
            "uri": uri,
            "opened": opened,
            "actions": actions or [],
            "changed": changed,
            "encoding": result.capabilities.position_encoding,
        }
    finally:
        await client.stop()


def _apply(text: str, edits: list[types.TextEdit], encoding: str = "utf-16") -> str:
    """The edits applied as an editor counting positions in `encoding` applies them."""
    codec = ENCODINGS[encoding]
    width = len("a".encode(codec))
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode(codec)) // width)
    units = text.encode(codec)

    def at(position: types.Position) -> int:
        return width * (offsets[min(position.line, len(lines))] + position.character)

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        units = units[: at(edit.range.start)] + edit.new_text.encode(codec) + units[at(edit.range.end) :]
    return units.decode(codec)


def test_diagnostics_quick_fix_and_fix_all(tmp_path: Path) -> None:
    session = asyncio.run(_session(tmp_path, HAZARD))
    (diagnostic,) = session["opened"].diagnostics
    assert (diagnostic.code, diagnostic.source) == (HAZARD_CODE, "amplint")
    assert diagnostic.severity == types.DiagnosticSeverity.Information  # AMP008: a deprecation
    kinds = {action.kind: action for action in session["actions"]}
    quick = kinds[types.CodeActionKind.QuickFix]
    assert quick.is_preferred and "unsafe" not in quick.title
    assert _apply(HAZARD, quick.edit.changes[session["uri"]]) == HAZARD_FIXED
    fix_all = kinds["source.fixAll.amplint"]
    assert _apply(HAZARD, fix_all.edit.changes[session["uri"]]) == HAZARD_FIXED
    assert not session["changed"].diagnostics  # the edited text is checked, not the file on disk
    assert not (tmp_path / "model.py").exists()


def test_positions_count_utf16_units(tmp_path: Path) -> None:
    session = asyncio.run(_session(tmp_path, WIDE))
    (diagnostic,) = session["opened"].diagnostics
    line = WIDE.splitlines()[4]
    start = line.index("torch.cuda")
    # U+1D538 is one code point and two UTF-16 units: the range starts one unit later than a code-point count.
    assert (diagnostic.range.start.line, diagnostic.range.start.character) == (4, start + 1)
    (quick,) = [a for a in session["actions"] if a.kind == types.CodeActionKind.QuickFix]
    assert 'torch.amp.GradScaler("cuda")' in _apply(WIDE, quick.edit.changes[session["uri"]])


def test_the_files_configuration_applies(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nignore = ["AMP008"]\n')
    session = asyncio.run(_session(tmp_path, HAZARD))
    assert not session["opened"].diagnostics


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_each_offered_position_encoding_is_used_and_the_text_kept(tmp_path: Path, encoding: str) -> None:
    # The client prefers `encoding`; the others follow, as Neovim offers UTF-8 first.
    offered = [encoding, *(other for other in ENCODINGS if other != encoding)]
    session = asyncio.run(_session(tmp_path, MIXED, offered=offered))
    assert session["encoding"] == encoding
    (diagnostic,) = session["opened"].diagnostics
    line = MIXED.splitlines()[5]
    codec = ENCODINGS[encoding]
    start = len(line[: line.index("torch.cuda")].encode(codec)) // len("a".encode(codec))
    assert (diagnostic.range.start.line, diagnostic.range.start.character) == (5, start)
    fixed = MIXED.replace("torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")')
    kinds = {action.kind: action for action in session["actions"]}
    assert _apply(MIXED, kinds[types.CodeActionKind.QuickFix].edit.changes[session["uri"]], encoding) == fixed
    # The cookie said how the file's bytes were read; the editor's text is fixed as text.
    assert _apply(MIXED, kinds["source.fixAll.amplint"].edit.changes[session["uri"]], encoding) == fixed


def test_an_encoding_the_server_lacks_is_not_chosen(tmp_path: Path) -> None:
    session = asyncio.run(_session(tmp_path, MIXED, offered=["utf-7", "utf-32"]))
    assert session["encoding"] == "utf-32"
    (diagnostic,) = session["opened"].diagnostics
    assert diagnostic.range.start.character == MIXED.splitlines()[5].index("torch.cuda")
