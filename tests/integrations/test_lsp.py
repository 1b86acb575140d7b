"""`amplint server` end to end: the real server in a subprocess, pygls's language client speaking LSP
to it over stdio, as an editor does."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient
from support import HAZARD, HAZARD_CODE, HAZARD_FIXED, write

# A non-BMP character before the finding on its line: LSP counts UTF-16 units, amplint code points.
WIDE = "import torch\n\n\ndef f():\n    s = '\U0001d538'; scaler = torch.cuda.amp.GradScaler()\n    return s, scaler\n"


async def _session(root: Path, text: str, uri_name: str = "model.py") -> dict:
    client = LanguageClient("amplint-test", "1")
    published: asyncio.Queue[types.PublishDiagnosticsParams] = asyncio.Queue()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def _diagnostics(params: types.PublishDiagnosticsParams) -> None:
        published.put_nowait(params)

    await client.start_io(sys.executable, "-m", "amplint", "server", cwd=str(root))
    try:
        await client.initialize_async(
            types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=root.as_uri())
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
        return {"uri": uri, "opened": opened, "actions": actions or [], "changed": changed}
    finally:
        await client.stop()


def _apply(text: str, edits: list[types.TextEdit]) -> str:
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode("utf-16-le")) // 2)
    units = text.encode("utf-16-le")

    def at(position: types.Position) -> int:
        return 2 * (offsets[min(position.line, len(lines))] + position.character)

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        units = (
            units[: at(edit.range.start)] + edit.new_text.encode("utf-16-le") + units[at(edit.range.end) :]
        )
    return units.decode("utf-16-le")


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
