"""`amplint server`: a Language Server (stdio) that puts the static pass in the editor.

Diagnostics are published when a Python document is opened, changed or saved, from the text the
editor holds, checked as the file it is (its `[tool.amplint]` configuration and per-file ignores
apply). Each finding with a fix offers it as a quick fix (the title says when the fix is unsafe); the
`source.fixAll.amplint` action applies every safe fix at once, as `amplint check --fix` would.
The text checked and fixed is the editor's own: a coding cookie or a BOM said how the file's
bytes were read and never touches it. Positions are converted between amplint's code points and the
units of the position encoding negotiated with the editor (the first of `general.positionEncodings`
that is UTF-8, UTF-16 or UTF-32; UTF-16 when the editor offers none), announced in
`capabilities.positionEncoding`.
"""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from amplint import __version__
from amplint.config import ConfigError, load_settings
from amplint.diagnostics import SAFE, UNSAFE, Diagnostic, Edit, Severity
from amplint.pipeline.check import CheckRun, check_source
from amplint.source import NEWLINE, SourceFile, display_path

FIX_ALL = f"{types.CodeActionKind.SourceFixAll.value}.amplint"
_SEVERITY = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
}


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


class AmplintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("amplint", __version__)
        self.checked: dict[str, _Found] = {}  # per document: what its last check found

    def check(self, uri: str, *, fix: bool = False) -> tuple[CheckRun, str | None] | None:
        """The run over the document's text as the editor holds it, and with `fix` the fixed text;
        None when it cannot be checked (the reason is shown to the user)."""
        document = self.workspace.get_text_document(uri)
        path = Path(to_fs_path(uri) or document.filename or "untitled.py")
        try:
            # The file need not exist: its configuration is searched for from its folder upward.
            return check_source(
                SourceFile.of_text(document.source, path), display_path(path), load_settings([path]), fix=fix
            )
        except ConfigError as exc:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=str(exc)))
            return None

    def lines(self, uri: str) -> _Lines:
        return _Lines(self.workspace.get_text_document(uri).source, self.workspace.position_encoding)

    def publish(self, uri: str) -> None:
        document = self.workspace.get_text_document(uri)
        checked = self.check(uri)
        if checked is None:
            return
        run, _ = checked
        lines = self.lines(uri)
        found = [(d, self.to_lsp(d, lines)) for d in run.diagnostics]
        self.checked[uri] = found
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(
                uri=uri, version=document.version, diagnostics=[f for _, f in found]
            )
        )

    @staticmethod
    def to_lsp(diagnostic: Diagnostic, lines: _Lines) -> types.Diagnostic:
        message = diagnostic.message + (f"\nhelp: {diagnostic.help}" if diagnostic.help else "")
        return types.Diagnostic(
            range=lines.range(diagnostic.line, diagnostic.column, diagnostic.end_line, diagnostic.end_column),
            message=message,
            severity=_SEVERITY.get(Severity(diagnostic.severity), types.DiagnosticSeverity.Warning),
            code=diagnostic.code,
            source="amplint",
            data={"name": diagnostic.name},
        )


server = AmplintServer()


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def _opened(ls: AmplintServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.publish(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def _changed(ls: AmplintServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.publish(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def _saved(ls: AmplintServer, params: types.DidSaveTextDocumentParams) -> None:
    ls.publish(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def _closed(ls: AmplintServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.checked.pop(params.text_document.uri, None)
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[])
    )


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL]),
)
def _code_actions(ls: AmplintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    wanted = params.context.only
    actions: list[types.CodeAction] = []
    found = ls.checked.get(uri, [])
    lines = ls.lines(uri)
    if wanted is None or types.CodeActionKind.QuickFix in wanted:
        for diagnostic, shown in found:
            fix = diagnostic.fix
            if (
                fix is None
                or fix.applicability not in (SAFE, UNSAFE)
                or not _overlaps(shown.range, params.range)
            ):
                continue
            unsafe = fix.applicability != SAFE
            actions.append(
                types.CodeAction(
                    title=f"amplint: {fix.description}"
                    + (" (unsafe: may change a consumer's dtype)" if unsafe else ""),
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[shown],
                    is_preferred=not unsafe,
                    edit=types.WorkspaceEdit(changes={uri: [lines.edit(edit) for edit in fix.edits]}),
                )
            )
    if wanted is None or any(kind.startswith(types.CodeActionKind.SourceFixAll.value) for kind in wanted):
        fixed = ls.check(uri, fix=True)
        if fixed is not None and fixed[0].fixed and fixed[1] is not None:
            edit = types.TextEdit(range=lines.whole(), new_text=fixed[1])
            actions.append(
                types.CodeAction(
                    title=f"amplint: fix all ({fixed[0].fixed} safe)",
                    kind=FIX_ALL,
                    edit=types.WorkspaceEdit(changes={uri: [edit]}),
                )
            )
    return actions


def _overlaps(a: types.Range, b: types.Range) -> bool:
    def key(p: types.Position) -> tuple[int, int]:
        return (p.line, p.character)

    return key(a.start) <= key(b.end) and key(b.start) <= key(a.end)


def serve() -> None:
    server.start_io()
