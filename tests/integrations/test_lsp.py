"""`amplint server` end to end: the real server in a subprocess, pygls's language client speaking LSP
to it over stdio, as an editor does (the client of benchmarks/lsp_latency.py)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from support import HAZARD, HAZARD_CODE, HAZARD_FIXED, write

import amplint
from amplint.rules import help_uri, rule_by_code

_SPEC = importlib.util.spec_from_file_location(
    "lsp_latency", Path(__file__).parents[2] / "benchmarks" / "lsp_latency.py"
)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = bench  # its dataclasses look their module up while the class is made
_SPEC.loader.exec_module(bench)
Editor = bench.Editor

# A non-BMP character before the finding on its line: LSP counts UTF-16 units, amplint code points.
WIDE = "import torch\n\n\ndef f():\n    s = '\U0001d538'; scaler = torch.cuda.amp.GradScaler()\n    return s, scaler\n"
# Characters of one, two, three and four UTF-8 bytes (one or two UTF-16 units) before the finding,
# in a file whose coding cookie says latin-1, which can encode none of the last three.
MIXED = (
    "# -*- coding: latin-1 -*-\nimport torch\n\n\ndef f():\n"
    "    s = 'café € 😀 中文'; scaler = torch.cuda.amp.GradScaler()\n    return s, scaler\n"
)
ENCODINGS = {"utf-8": "utf-8", "utf-16": "utf-16-le", "utf-32": "utf-32-le"}
EVERYTHING = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=99, character=0))
FIX_ALL = "source.fixAll.amplint"
# An editor that fetches a code action's edit when the user picks it (VS Code and Neovim do).
RESOLVING = types.ClientCapabilities(
    text_document=types.TextDocumentClientCapabilities(
        code_action=types.CodeActionClientCapabilities(
            resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"])
        )
    )
)


async def _actions(
    editor: bench.Editor, uri: str, only: list[str] | None = None, everything: types.Range = EVERYTHING
) -> list[types.CodeAction]:
    context = types.CodeActionContext(diagnostics=[], only=only)
    return list(
        await editor.client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri), range=everything, context=context
            )
        )
        or []
    )


async def _session(root: Path, text: str, offered: list[str] | None = None) -> dict:
    """Open `text`, ask for its quick fixes and its fix-all, then replace it with clean code."""
    general = None if offered is None else types.GeneralClientCapabilities(position_encodings=offered)
    async with Editor(root, types.ClientCapabilities(general=general)) as editor:
        uri = editor.open("my model.py", text)  # a space: the URI has a %20 the server must decode
        opened = await editor.diagnostics(uri)
        quick = await _actions(editor, uri)
        fix_all = await _actions(editor, uri, [FIX_ALL])
        editor.change(uri, 2, types.TextDocumentContentChangeWholeDocument(text="x = 1\n"))
        changed = await editor.diagnostics(uri)
        assert editor.initialized is not None
        return {
            "uri": uri,
            "opened": opened,
            "quick": quick,
            "fix_all": fix_all,
            "changed": changed,
            "encoding": editor.initialized.capabilities.position_encoding,
        }


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


def _fix(actions: list[types.CodeAction]) -> types.CodeAction:
    """The one quick fix that is amplint's fix of the finding (not its `# noqa`)."""
    (fix,) = [a for a in actions if a.kind == types.CodeActionKind.QuickFix and "disable" not in a.title]
    return fix


def test_diagnostics_quick_fix_and_fix_all(tmp_path: Path) -> None:
    session = asyncio.run(_session(tmp_path, HAZARD))
    (diagnostic,) = session["opened"].diagnostics
    assert (diagnostic.code, diagnostic.source) == (HAZARD_CODE, "amplint")
    assert diagnostic.severity == types.DiagnosticSeverity.Information  # AMP008: a deprecation
    rule = rule_by_code(HAZARD_CODE)
    assert rule is not None
    # The rule's page, as SARIF's helpUri and `amplint rule` give it.
    assert diagnostic.code_description.href == help_uri(rule)
    assert diagnostic.code_description.href.endswith("/docs/rules/AMP008.md")
    quick = _fix(session["quick"])
    assert quick.is_preferred and "unsafe" not in quick.title
    assert _apply(HAZARD, quick.edit.changes[session["uri"]]) == HAZARD_FIXED
    # Without resolve support and without asking for it by kind, no fix-all (it would run the fixer).
    assert all(action.kind == types.CodeActionKind.QuickFix for action in session["quick"])
    (fix_all,) = session["fix_all"]
    assert fix_all.kind == FIX_ALL
    assert _apply(HAZARD, fix_all.edit.changes[session["uri"]]) == HAZARD_FIXED
    assert not session["changed"].diagnostics  # the edited text is checked, not the file on disk
    assert not (tmp_path / "my model.py").exists()


def test_positions_count_utf16_units(tmp_path: Path) -> None:
    session = asyncio.run(_session(tmp_path, WIDE))
    (diagnostic,) = session["opened"].diagnostics
    line = WIDE.splitlines()[4]
    start = line.index("torch.cuda")
    # U+1D538 is one code point and two UTF-16 units: the range starts one unit later than a code-point count.
    assert (diagnostic.range.start.line, diagnostic.range.start.character) == (4, start + 1)
    assert 'torch.amp.GradScaler("cuda")' in _apply(WIDE, _fix(session["quick"]).edit.changes[session["uri"]])


def test_a_chain_fix_lists_the_finding_it_covers_and_writes_no_text_as_it_stands(tmp_path: Path) -> None:
    """AMP001's quick fix of the RWKV chain fixes AMP007's `cumsum` too: the action names both
    findings, and each of its edits changes the text it replaces."""
    (example,) = [e for e in rule_by_code("AMP001").bad if "self.out(x * torch.exp(w.cumsum(1)))" in e.code]
    assert example.fixed is not None
    code = example.code.lstrip("\n")
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nselect = ["AMP001", "AMP007"]\nprecision = "bf16"\n')

    async def run() -> tuple[str, list[types.CodeAction]]:
        async with Editor(tmp_path, types.ClientCapabilities()) as editor:
            uri = editor.open("time_mix.py", code)
            await editor.diagnostics(uri)
            return uri, await _actions(editor, uri)

    uri, actions = asyncio.run(run())
    (chain,) = [a for a in actions if "keep its chain in float32" in a.title]
    assert sorted(d.code for d in chain.diagnostics or []) == ["AMP001", "AMP007"]
    lines = code.splitlines()
    for edit in chain.edit.changes[uri]:
        start, end = edit.range.start, edit.range.end
        assert start.line == end.line and edit.new_text != lines[start.line][start.character : end.character]
    assert _apply(code, chain.edit.changes[uri]) == example.fixed.lstrip("\n")


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
    assert _apply(MIXED, _fix(session["quick"]).edit.changes[session["uri"]], encoding) == fixed
    # The cookie said how the file's bytes were read; the editor's text is fixed as text.
    (fix_all,) = session["fix_all"]
    assert _apply(MIXED, fix_all.edit.changes[session["uri"]], encoding) == fixed


def test_an_encoding_the_server_lacks_is_not_chosen(tmp_path: Path) -> None:
    session = asyncio.run(_session(tmp_path, MIXED, offered=["utf-7", "utf-32"]))
    assert session["encoding"] == "utf-32"
    (diagnostic,) = session["opened"].diagnostics
    assert diagnostic.range.start.character == MIXED.splitlines()[5].index("torch.cuda")


def test_disable_for_this_line_joins_the_lines_noqa(tmp_path: Path) -> None:
    # The finding's line already suppresses another code: the new one joins that comment.
    text = HAZARD.replace("GradScaler()", "GradScaler()  # noqa: AMP006 - kept")

    async def run() -> tuple[list[str], list[str], list[types.Diagnostic]]:
        async with Editor(tmp_path) as editor:
            uri = editor.open("model.py", text)
            await editor.diagnostics(uri)
            titles = [a.title for a in await _actions(editor, uri)]
            (disable,) = [a for a in await _actions(editor, uri) if "disable" in a.title]
            new = _apply(text, disable.edit.changes[uri])
            editor.change(uri, 2, types.TextDocumentContentChangeWholeDocument(text=new))
            return titles, new.splitlines(), (await editor.diagnostics(uri)).diagnostics

    titles, lines, left = asyncio.run(run())
    assert "amplint: disable AMP008 for this line" in titles
    assert lines[4] == "    s = torch.cuda.amp.GradScaler()  # noqa: AMP006, AMP008 - kept"
    assert lines[:4] + lines[5:] == text.splitlines()[:4] + text.splitlines()[5:]
    assert not left  # the comment suppresses the finding


def test_ten_quick_edits_run_fewer_checks_and_publish_only_the_last(tmp_path: Path) -> None:
    text = bench.source(5000)

    async def run() -> tuple[bench.Burst, int, list[types.CodeAction], types.CodeAction, int]:
        async with Editor(tmp_path, RESOLVING) as editor:
            burst = await bench.burst(editor, "model.py", text, 10)
            uri = (tmp_path / "model.py").as_uri()
            before = len(editor.checks)
            actions = await _actions(editor, uri)  # no kind filter: served from the last check
            served = len(editor.checks) - before
            (unresolved,) = [a for a in actions if a.kind == FIX_ALL]
            resolved = await editor.client.code_action_resolve_async(unresolved)
            fixes = [m for m in editor.checks[before:] if m.startswith(f"amplint: fixed {uri} ")]
            return burst, served, actions, resolved, len(fixes)

    burst, served, actions, resolved, fixes = asyncio.run(run())
    assert burst.first_published == 11  # versions 2 to 10 were never published
    assert burst.checks < 10  # the edits came faster than the debounce: not one check each
    assert served == 0
    assert actions[0].edit is not None  # a quick fix carries its edit
    typed = text + "x" * 10
    assert 'def make_scaler():\n    return torch.amp.GradScaler("cuda")\n' in _apply(
        typed, resolved.edit.changes[(tmp_path / "model.py").as_uri()]
    )
    assert fixes == 1  # the fixer ran once, when the action was resolved


def _notebook_cells() -> list[tuple[str, str]]:
    return [
        ("code", "import torch\n"),
        ("markdown", "# Scaler\n`torch.cuda.amp.GradScaler()` is old."),
        ("code", "%matplotlib inline\nscaler = torch.cuda.amp.GradScaler()"),
    ]


def test_notebook_cells_are_checked_as_the_cli_checks_the_notebook(tmp_path: Path) -> None:
    cells = _notebook_cells()
    ipynb = {
        "cells": [
            {"cell_type": kind, "metadata": {}, "source": text}
            | ({"execution_count": None, "outputs": []} if kind == "code" else {})
            for kind, text in cells
        ],
        "metadata": {"kernelspec": {"language": "python", "name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = write(tmp_path / "cli.ipynb", json.dumps(ipynb))
    expected = [(d.cell, d.line, d.column, d.code) for d in amplint.check_paths([path])]
    assert expected == [(3, 2, 10, HAZARD_CODE)]
    notebook_uri = (tmp_path / "lab.ipynb").as_uri()
    cell_uris = [f"{notebook_uri}#cell{i}" for i in range(len(cells))]

    async def run() -> dict:
        async with Editor(
            tmp_path,
            types.ClientCapabilities(
                notebook_document=types.NotebookDocumentClientCapabilities(
                    synchronization=types.NotebookDocumentSyncClientCapabilities()
                )
            ),
        ) as editor:
            editor.client.notebook_document_did_open(
                types.DidOpenNotebookDocumentParams(
                    notebook_document=types.NotebookDocument(
                        uri=notebook_uri,
                        notebook_type="jupyter-notebook",
                        version=1,
                        cells=[
                            types.NotebookCell(
                                kind=types.NotebookCellKind.Code
                                if kind == "code"
                                else types.NotebookCellKind.Markup,
                                document=uri,
                            )
                            for (kind, _), uri in zip(cells, cell_uris, strict=True)
                        ],
                    ),
                    cell_text_documents=[
                        types.TextDocumentItem(
                            uri=uri,
                            language_id="python" if kind == "code" else "markdown",
                            version=1,
                            text=text,
                        )
                        for (kind, text), uri in zip(cells, cell_uris, strict=True)
                    ],
                )
            )
            opened = {uri: await editor.diagnostics(uri) for uri in cell_uris}
            quick = _fix(await _actions(editor, cell_uris[2]))
            fixed = _apply(cells[2][1], quick.edit.changes[cell_uris[2]])
            (fix_all,) = await _actions(editor, cell_uris[0], [FIX_ALL])
            editor.client.notebook_document_did_change(
                types.DidChangeNotebookDocumentParams(
                    notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook_uri, version=2),
                    change=types.NotebookDocumentChangeEvent(
                        cells=types.NotebookDocumentCellChanges(
                            text_content=[
                                types.NotebookDocumentCellContentChanges(
                                    document=types.VersionedTextDocumentIdentifier(
                                        uri=cell_uris[2], version=2
                                    ),
                                    changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)],
                                )
                            ]
                        )
                    ),
                )
            )
            changed = await editor.diagnostics(cell_uris[2])
            editor.client.notebook_document_did_close(
                types.DidCloseNotebookDocumentParams(
                    notebook_document=types.NotebookDocumentIdentifier(uri=notebook_uri),
                    cell_text_documents=[types.TextDocumentIdentifier(uri=uri) for uri in cell_uris],
                )
            )
            closed = await editor.diagnostics(cell_uris[2])
            return {
                "opened": opened,
                "fixed": fixed,
                "fix_all": fix_all,
                "changed": changed,
                "closed": closed,
            }

    got = asyncio.run(run())
    opened = got["opened"]
    assert not opened[cell_uris[0]].diagnostics and not opened[cell_uris[1]].diagnostics
    (diagnostic,) = opened[cell_uris[2]].diagnostics
    # Lines and columns count in the cell, as the CLI reports them (0-based in LSP).
    assert (diagnostic.code, diagnostic.range.start.line + 1, diagnostic.range.start.character + 1) == (
        HAZARD_CODE,
        2,
        10,
    )
    assert got["fixed"] == '%matplotlib inline\nscaler = torch.amp.GradScaler("cuda")'
    # Fix-all, asked for in any cell, rewrites the one cell with a fix, and only that one.
    changes = got["fix_all"].edit.changes
    assert list(changes) == [cell_uris[2]]
    assert _apply(cells[2][1], changes[cell_uris[2]]) == got["fixed"]
    assert (got["changed"].version, list(got["changed"].diagnostics)) == (2, [])
    assert not got["closed"].diagnostics
