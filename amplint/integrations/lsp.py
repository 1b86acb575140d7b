"""`amplint server`: a Language Server (stdio) that puts the static pass in the editor.

Diagnostics are published when a Python document is opened, changed or saved, from the text the
editor holds, checked as the file it is (its `[tool.amplint]` configuration and per-file ignores
apply). An edit waits `DEBOUNCE` seconds for the next one before it is checked, checks run one at a
time off the message loop, and a check whose document changed meanwhile is dropped: a burst of
typing costs one check, and only the latest version's diagnostics are published. Each check is
logged (`window/logMessage`, type Log) with the version it read and how long it took.

Jupyter notebooks (`notebookDocument/*`) are checked as `amplint check` checks an `.ipynb` file: the
code cells as one module, in order; each cell gets its own diagnostics.

Code actions are served from the last check of the version the editor shows, never by checking
again: each finding with a fix offers it as a quick fix (the title says when the fix is unsafe), and
`disable AMPxxx for this line` adds the code to the line's `# noqa` comment. The
`source.fixAll.amplint` action applies every safe fix at once, as `amplint check --fix` would; the
fixer runs only when that action is asked for by kind or resolved (`codeAction/resolve`).

The text checked and fixed is the editor's own: a coding cookie or a BOM said how the file's
bytes were read and never touches it. Positions are converted between amplint's code points and the
units of the position encoding negotiated with the editor (the first of `general.positionEncodings`
that is UTF-8, UTF-16 or UTF-32; UTF-16 when the editor offers none), announced in
`capabilities.positionEncoding`.
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from amplint import __version__
from amplint.config import ConfigError, load_settings
from amplint.diagnostics import SAFE, UNSAFE, CellEdit, Diagnostic, Edit, Severity
from amplint.pipeline.check import CheckRun, check_source
from amplint.rules import help_uri, rule_by_code
from amplint.rules.suppression import with_noqa
from amplint.source import NEWLINE, SourceFile, display_path

# Seconds an edit waits for the next before it is checked: longer than the gap between keystrokes.
DEBOUNCE = 0.2
FIX_ALL = f"{types.CodeActionKind.SourceFixAll.value}.amplint"
_SEVERITY = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
}
_NOTEBOOKS = types.NotebookDocumentSyncOptions(
    notebook_selector=[
        types.NotebookDocumentFilterWithCells(
            notebook="jupyter-notebook", cells=[types.NotebookCellLanguage(language="python")]
        )
    ]
)


# A finding as amplint holds it and as the editor was shown it.
_Found = list[tuple[Diagnostic, types.Diagnostic]]


# Code units per character of each position encoding: the bytes of a code point's encoding, divided.
_UNITS: dict[str, tuple[str, int]] = {
    types.PositionEncodingKind.Utf8.value: ("utf-8", 1),
    types.PositionEncodingKind.Utf16.value: ("utf-16-le", 2),
    types.PositionEncodingKind.Utf32.value: ("utf-32-le", 4),
}


class _Lines:
    """A document's lines, to turn amplint's 1-based code-point columns into LSP positions counted in
    the negotiated encoding's units."""

    def __init__(self, text: str, encoding: str | None) -> None:
        self.text = text
        self.lines = NEWLINE.split(text)
        self.codec, self.width = _UNITS.get(encoding or "", _UNITS[types.PositionEncodingKind.Utf16.value])

    def position(self, line: int, column: int) -> types.Position:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        # A lone surrogate (text the editor could not decode) still counts as one unit of its own.
        units = len(text[: max(column - 1, 0)].encode(self.codec, errors="surrogatepass")) // self.width
        return types.Position(line=max(line - 1, 0), character=units)

    def whole(self) -> types.Range:
        last = len(self.lines)
        return types.Range(
            start=types.Position(line=0, character=0), end=self.position(last, len(self.lines[-1]) + 1)
        )

    def range(self, line: int, column: int, end_line: int, end_column: int) -> types.Range:
        return types.Range(start=self.position(line, column), end=self.position(end_line, end_column))

    def edit(self, edit: Edit) -> types.TextEdit:
        return types.TextEdit(
            range=self.range(edit.line, edit.column, edit.end_line, edit.end_column), new_text=edit.content
        )

    def noqa(self, line: int, code: str) -> types.TextEdit | None:
        """The edit that adds `code` to the `# noqa` of `line`; None where the line cannot end in a
        comment or already suppresses it."""
        text, skipped = with_noqa(self.text, {line: {code}})
        if skipped or text == self.text:
            return None
        new = NEWLINE.split(text)[line - 1]
        return types.TextEdit(range=self.range(line, 1, line, len(self.lines[line - 1]) + 1), new_text=new)


@dataclass
class _Target:
    """What one check reads: a Python document, or a notebook as the `.ipynb` text the CLI reads."""

    uri: str  # the document's or the notebook's
    version: int | None
    path: Path
    text: str
    # Each document the findings are shown in, with its version and text: the document itself, or
    # the notebook's cells in order (cell N, as amplint numbers cells, is the N-th).
    documents: list[tuple[str, int | None, str]]
    notebook: bool = False


@dataclass
class _Result:
    """The last check of a target, for the version it read: what each document was shown."""

    target: _Target
    shown: dict[str, tuple[_Lines, _Found]]
    fix_all: dict[str, list[types.TextEdit]] | None = None  # computed when first asked for


class AmplintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("amplint", __version__, notebook_document_sync=_NOTEBOOKS)
        self.results: dict[str, _Result] = {}  # per target: its last check
        self.pending: dict[str, asyncio.Task[None]] = {}  # per target: the check waiting to run
        self.checker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amplint-check")

    # --- what is checked -----------------------------------------------------------------------

    def target_of(self, uri: str) -> str:
        """The target a document belongs to: its notebook, or itself."""
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        return notebook.uri if notebook is not None else uri

    def snapshot(self, uri: str) -> _Target | None:
        """The target as the editor holds it now; None once it is closed."""
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is not None:
            cells: list[dict[str, Any]] = []
            documents = []
            for cell in notebook.cells:
                held = self.workspace.get_text_document(cell.document)
                code = cell.kind == types.NotebookCellKind.Code and held.language_id == "python"
                documents.append((cell.document, held.version, held.source))
                cells.append(
                    {
                        "cell_type": "code",
                        "execution_count": None,
                        "metadata": {},
                        "outputs": [],
                        "source": held.source,
                    }
                    if code
                    else {"cell_type": "markdown", "metadata": {}, "source": held.source}
                )
            ipynb = {
                "cells": cells,
                "metadata": {"language_info": {"name": "python"}},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
            path = Path(to_fs_path(uri) or "untitled.ipynb")
            return _Target(uri, notebook.version, path, json.dumps(ipynb, indent=1), documents, notebook=True)
        document = self.opened(uri)
        if document is None:
            return None
        path = Path(to_fs_path(uri) or document.filename or "untitled.py")
        return _Target(
            uri, document.version, path, document.source, [(uri, document.version, document.source)]
        )

    def opened(self, uri: str) -> TextDocument | None:
        """The document, if the editor has it open (pygls keys documents by their unquoted URI)."""
        return self.workspace.text_documents.get(unquote(uri))

    def version_of(self, uri: str) -> int | None:
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is not None:
            return notebook.version
        document = self.opened(uri)
        return document.version if document is not None else None

    # --- checking ------------------------------------------------------------------------------

    def schedule(self, uri: str, delay: float) -> None:
        """Check the target `delay` seconds from now, unless it changes first."""
        waiting = self.pending.pop(uri, None)
        if waiting is not None:
            waiting.cancel()
        self.pending[uri] = asyncio.get_running_loop().create_task(self._check_later(uri, delay))

    def forget(self, uri: str) -> list[str]:
        """Drop what is known of a closed target; the documents it was shown in."""
        waiting = self.pending.pop(uri, None)
        if waiting is not None:
            waiting.cancel()
        result = self.results.pop(uri, None)
        return list(result.shown) if result is not None else []

    async def _check_later(self, uri: str, delay: float) -> None:
        await asyncio.sleep(delay)
        target = self.snapshot(uri)
        if target is None:
            return
        run = await self.run_check(target, fix=False)
        # A newer version arrived while this one was checked: its own check publishes.
        if run is None or self.version_of(uri) != target.version:
            return
        self.publish(target, run[0])

    async def run_check(self, target: _Target, *, fix: bool) -> tuple[CheckRun, str | None] | None:
        """The check of the target's text, in the checking thread (the message loop goes on reading
        the editor's messages meanwhile); None when it cannot be checked (the user is told why)."""
        started = time.perf_counter()
        try:
            checked = await asyncio.get_running_loop().run_in_executor(self.checker, _check, target, fix)
        except ConfigError as exc:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=str(exc)))
            return None
        except Exception as exc:  # a bug: said in the editor, as pygls says a failed handler's
            message = f"amplint: checking {target.uri} failed: {type(exc).__name__}: {exc}"
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=message))
            return None
        what = "fixed" if fix else "checked"
        self.window_log_message(
            types.LogMessageParams(
                type=types.MessageType.Log,
                message=f"amplint: {what} {target.uri} version {target.version} "
                f"in {time.perf_counter() - started:.3f} s",
            )
        )
        return checked

    def publish(self, target: _Target, run: CheckRun) -> None:
        encoding = self.workspace.position_encoding
        shown: dict[str, tuple[_Lines, _Found]] = {
            document: (_Lines(text, encoding), []) for document, _, text in target.documents
        }
        for diagnostic in run.diagnostics:
            # A finding outside any cell (none is expected from a notebook the server wrote) shows in the first.
            index = (diagnostic.cell or 1) - 1
            if not 0 <= index < len(target.documents):
                continue
            lines, found = shown[target.documents[index][0]]
            found.append((diagnostic, _to_lsp(diagnostic, lines)))
        gone = self.results.get(target.uri)
        self.results[target.uri] = _Result(target, shown)
        versions = {document: version for document, version, _ in target.documents}
        for document in dict.fromkeys([*(gone.shown if gone is not None else ()), *shown]):
            found = shown[document][1] if document in shown else []
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(
                    uri=document, version=versions.get(document), diagnostics=[f for _, f in found]
                )
            )

    async def fix_all(self, result: _Result) -> dict[str, list[types.TextEdit]]:
        """The edits that apply every safe fix to the version `result` checked, per document (each
        changed document replaced whole); computed once per version."""
        if result.fix_all is not None:
            return result.fix_all
        target = result.target
        fixed = await self.run_check(target, fix=True)
        edits: dict[str, list[types.TextEdit]] = {}
        if fixed is not None and fixed[0].fixed and fixed[1] is not None:
            texts = _cell_texts(fixed[1]) if target.notebook else [fixed[1]]
            for (document, _, text), new in zip(target.documents, texts, strict=True):
                if new != text:
                    edits[document] = [types.TextEdit(range=result.shown[document][0].whole(), new_text=new)]
        result.fix_all = edits
        return edits

    def current(self, uri: str) -> tuple[_Result, _Lines, _Found] | None:
        """The last check's findings in document `uri`, if it read the version the editor holds."""
        result = self.results.get(self.target_of(uri))
        if (
            result is None
            or uri not in result.shown
            or self.version_of(result.target.uri) != result.target.version
        ):
            return None
        lines, found = result.shown[uri]
        return result, lines, found

    def resolves_edits(self) -> bool:
        """Whether the editor asks for a code action's edit when the user picks it."""
        capabilities = self.client_capabilities.text_document
        action = capabilities.code_action if capabilities is not None else None
        support = action.resolve_support if action is not None else None
        return support is not None and "edit" in support.properties


def _check(target: _Target, fix: bool) -> tuple[CheckRun, str | None]:
    # The file need not exist: its configuration is searched for from its folder upward.
    return check_source(
        SourceFile.of_text(target.text, target.path),
        display_path(target.path),
        load_settings([target.path]),
        fix=fix,
    )


def _cell_texts(ipynb: str) -> list[str]:
    """The cells' text in a notebook the fixer rewrote (it keeps the cells and their order)."""
    cells: list[dict[str, Any]] = json.loads(ipynb)["cells"]
    return ["".join(cell["source"]) for cell in cells]


def _to_lsp(diagnostic: Diagnostic, lines: _Lines) -> types.Diagnostic:
    message = diagnostic.message + (f"\nhelp: {diagnostic.help}" if diagnostic.help else "")
    rule = rule_by_code(diagnostic.code)
    return types.Diagnostic(
        range=lines.range(diagnostic.line, diagnostic.column, diagnostic.end_line, diagnostic.end_column),
        message=message,
        severity=_SEVERITY.get(Severity(diagnostic.severity), types.DiagnosticSeverity.Warning),
        code=diagnostic.code,
        code_description=types.CodeDescription(href=help_uri(rule)) if rule is not None else None,
        source="amplint",
        data={"name": diagnostic.name},
    )


server = AmplintServer()


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def _opened(ls: AmplintServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri, 0)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def _changed(ls: AmplintServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri, DEBOUNCE)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def _saved(ls: AmplintServer, params: types.DidSaveTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri, 0)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def _closed(ls: AmplintServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.forget(params.text_document.uri)
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[])
    )


@server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
def _notebook_opened(ls: AmplintServer, params: types.DidOpenNotebookDocumentParams) -> None:
    ls.schedule(params.notebook_document.uri, 0)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
def _notebook_changed(ls: AmplintServer, params: types.DidChangeNotebookDocumentParams) -> None:
    ls.schedule(params.notebook_document.uri, DEBOUNCE)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
def _notebook_saved(ls: AmplintServer, params: types.DidSaveNotebookDocumentParams) -> None:
    ls.schedule(params.notebook_document.uri, 0)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
def _notebook_closed(ls: AmplintServer, params: types.DidCloseNotebookDocumentParams) -> None:
    shown = ls.forget(params.notebook_document.uri)
    for uri in {*shown, *(cell.uri for cell in params.cell_text_documents)}:
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL], resolve_provider=True
    ),
)
async def _code_actions(ls: AmplintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    checked = ls.current(uri)
    if checked is None:
        return []  # a check of this version is on its way; the editor asks again when it is shown
    result, lines, found = checked
    wanted = params.context.only
    actions: list[types.CodeAction] = []
    if wanted is None or types.CodeActionKind.QuickFix in wanted:
        actions += _quick_fixes(result, uri, lines, found, params.range)
    if wanted is not None and any(
        kind.startswith(types.CodeActionKind.SourceFixAll.value) for kind in wanted
    ):
        edits = await ls.fix_all(result)
        if edits:
            actions.append(_fix_all_action(edits))
    elif wanted is None and ls.resolves_edits() and any(d.fix is not None for d, _ in found):
        # Offered without its edit: the fixer runs only if the user picks it.
        actions.append(
            types.CodeAction(
                title="amplint: fix all safe fixes",
                kind=FIX_ALL,
                data={"target": result.target.uri, "version": result.target.version},
            )
        )
    return actions


@server.feature(types.CODE_ACTION_RESOLVE)
async def _resolve(ls: AmplintServer, action: types.CodeAction) -> types.CodeAction:
    data = action.data if isinstance(action.data, dict) else {}
    result = ls.results.get(str(data.get("target")))
    if action.kind != FIX_ALL or result is None or result.target.version != data.get("version"):
        return action  # the document changed since: nothing safe to apply
    action.edit = types.WorkspaceEdit(changes=await ls.fix_all(result))
    return action


def _quick_fixes(
    result: _Result, uri: str, lines: _Lines, found: _Found, wanted: types.Range
) -> list[types.CodeAction]:
    actions: list[types.CodeAction] = []
    suppressed: set[tuple[int, str]] = set()
    for diagnostic, shown in found:
        if not _overlaps(shown.range, wanted):
            continue
        fix = diagnostic.fix
        if fix is not None and fix.applicability in (SAFE, UNSAFE):
            unsafe = fix.applicability != SAFE
            changes: dict[str, list[types.TextEdit]] = {}
            for edit in fix.edits:
                # A notebook's edit counts lines in its cell, which is a document of its own.
                document = result.target.documents[edit.cell - 1][0] if isinstance(edit, CellEdit) else uri
                changes.setdefault(document, []).append(result.shown[document][0].edit(edit))
            actions.append(
                types.CodeAction(
                    title=f"amplint: {fix.description}"
                    + (" (unsafe: may change a consumer's dtype)" if unsafe else ""),
                    kind=types.CodeActionKind.QuickFix,
                    # With the findings its edits fix too (`Fix.covers`).
                    diagnostics=[
                        shown,
                        *(other for d, other in found if d.cell == diagnostic.cell and d.span in fix.covers),
                    ],
                    is_preferred=not unsafe,
                    edit=types.WorkspaceEdit(changes=changes),
                )
            )
        if (diagnostic.line, diagnostic.code) in suppressed:
            continue
        suppressed.add((diagnostic.line, diagnostic.code))
        noqa = lines.noqa(diagnostic.line, diagnostic.code)
        if noqa is not None:
            actions.append(
                types.CodeAction(
                    title=f"amplint: disable {diagnostic.code} for this line",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[shown],
                    edit=types.WorkspaceEdit(changes={uri: [noqa]}),
                )
            )
    return actions


def _fix_all_action(edits: dict[str, list[types.TextEdit]]) -> types.CodeAction:
    return types.CodeAction(
        title="amplint: fix all safe fixes", kind=FIX_ALL, edit=types.WorkspaceEdit(changes=edits)
    )


def _overlaps(a: types.Range, b: types.Range) -> bool:
    def key(p: types.Position) -> tuple[int, int]:
        return (p.line, p.character)

    return key(a.start) <= key(b.end) and key(b.start) <= key(a.end)


def serve() -> None:
    server.start_io()
