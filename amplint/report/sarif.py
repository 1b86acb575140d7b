"""SARIF 2.1.0 output, for GitHub code scanning and other SARIF consumers."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from amplint.diagnostics import Diagnostic, Edit, Severity
from amplint.report import ReportSummary, cell_position, confidence_note
from amplint.report.json import amplint_version, json_default

if TYPE_CHECKING:
    from amplint.rule import Rule

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/amplint/amplint"
SRCROOT = "%SRCROOT%"

_LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
# Codes the engine emits itself, without a Rule class behind them.
_BUILTIN_SUMMARIES = {"AMP900": "The file could not be parsed, so no rule checked it."}
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
# A drive letter or a UNC share: Windows paths even when amplint runs elsewhere (e.g. a CI report).
_WINDOWS_ABSOLUTE = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\[^\\])")
_WHAT_IT_DOES = re.compile(r"^##[ \t]+What it does[ \t]*\n(.*?)(?=^##[ \t]|\Z)", re.MULTILINE | re.DOTALL)


def _level(severity: object) -> str:
    try:
        return _LEVELS[Severity(severity)]
    except ValueError:
        return "warning"


def _what_it_does(docs: str) -> str:
    match = _WHAT_IT_DOES.search(docs)
    if not match:
        return ""
    # Plain text: unwrap the Markdown paragraph's hard line breaks.
    paragraphs = re.split(r"\n[ \t]*\n", match.group(1).strip())
    return "\n\n".join(" ".join(line.strip() for line in paragraph.splitlines()) for paragraph in paragraphs)


def _quote_path(posix: str) -> str:
    # surrogateescape: undecodable file names arrive as lone surrogates (os.fsdecode).
    return quote(posix.encode("utf-8", "surrogateescape"), safe="/")


def artifact_location(path: str) -> dict[str, str]:
    """A URI for `path`: a `file://` URI when absolute, else a relative reference to %SRCROOT%."""
    windows = os.name == "nt" or bool(_WINDOWS_ABSOLUTE.match(path))
    pure = PureWindowsPath(path) if windows else PurePosixPath(path)
    if pure.is_absolute():
        if isinstance(pure, PureWindowsPath):
            return {"uri": pure.as_uri()}  # Knows drive letters (file:///C:/x) and UNC (file://host/x).
        # POSIX keeps a leading "//"; as a URI it would read as an empty host segment.
        return {"uri": "file:///" + _quote_path(pure.as_posix().lstrip("/"))}
    # Percent-encoding ':' keeps a first segment like "a:b.py" from reading as a URI scheme.
    return {"uri": _quote_path(pure.as_posix()), "uriBaseId": SRCROOT}


def _region(line: int, column: int, end_line: int, end_column: int) -> dict[str, int]:
    # The schema requires positive numbers; a bogus position must not make the whole log invalid.
    start_line = max(line, 1)
    start_column = max(column, 1)
    final_line = max(end_line, start_line)
    final_column = max(end_column, 1)
    if final_line == start_line:
        final_column = max(final_column, start_column)
    return {
        "startLine": start_line,
        "startColumn": start_column,
        "endLine": final_line,
        "endColumn": final_column,
    }


def _message(text: str) -> dict[str, str]:
    return {"text": text}


def _rule_descriptor(rule: type[Rule], help_uri: str) -> dict[str, Any]:
    docs = rule.docs().strip()
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": _message(rule.summary),
        "fullDescription": _message(_what_it_does(docs) or rule.summary),
        "help": {"text": docs or rule.summary, "markdown": docs or rule.summary},
        "helpUri": help_uri,
        "defaultConfiguration": {"level": _level(rule.severity)},
    }


def _adhoc_descriptor(diagnostic: Diagnostic) -> dict[str, Any]:
    summary = _BUILTIN_SUMMARIES.get(diagnostic.code, diagnostic.name)
    return {
        "id": diagnostic.code,
        "name": diagnostic.name,
        "shortDescription": _message(summary),
        "fullDescription": _message(summary),
        "help": {"text": summary, "markdown": summary},
        "helpUri": INFORMATION_URI,
        "defaultConfiguration": {"level": _level(diagnostic.severity)},
    }


def _fix(diagnostic: Diagnostic, location: dict[str, str]) -> dict[str, Any]:
    assert diagnostic.fix is not None
    edits: list[Edit] = sorted(diagnostic.fix.edits)
    return {
        "description": _message(diagnostic.fix.description),
        "properties": {"applicability": diagnostic.fix.applicability},
        "artifactChanges": [
            {
                "artifactLocation": dict(location),
                "replacements": [
                    {
                        "deletedRegion": _region(edit.line, edit.column, edit.end_line, edit.end_column),
                        "insertedContent": {"text": edit.content},
                    }
                    for edit in edits
                ],
            }
        ],
    }


def _result(diagnostic: Diagnostic, rule_index: int) -> dict[str, Any]:
    location = artifact_location(diagnostic.path)
    # SARIF has no notebook cells: a notebook finding sits on the line of the .ipynb that holds its code
    # (columns there would count JSON, not code) and its message says where in the cell it is. Its fix
    # edits the cell, not the file's text, so it is left out.
    notebook = diagnostic.cell is not None
    message = f"{diagnostic.message} ({cell_position(diagnostic)})" if notebook else diagnostic.message
    note = confidence_note(diagnostic)
    if note is not None:
        message += f" [{note}]"
    region = (
        {"startLine": diagnostic.file_line, "endLine": diagnostic.file_line}
        if notebook
        else _region(diagnostic.line, diagnostic.column, diagnostic.end_line, diagnostic.end_column)
    )
    result: dict[str, Any] = {
        "ruleId": diagnostic.code,
        "ruleIndex": rule_index,
        "level": _level(diagnostic.severity),
        "message": _message(message),
        "locations": [{"physicalLocation": {"artifactLocation": location, "region": region}}],
    }
    evidence = diagnostic.extra.get("why")
    if isinstance(evidence, list) and evidence and not notebook:
        # Why the value has its dtype there: the autocast region, the cast, the op, in source order.
        result["relatedLocations"] = [
            {
                "id": i,
                "physicalLocation": {
                    "artifactLocation": location,
                    "region": {"startLine": step["line"], "startColumn": step["column"]},
                },
                "message": {"text": step["message"]},
            }
            for i, step in enumerate(evidence)
        ]
    if diagnostic.fix is not None and not notebook:
        result["fixes"] = [_fix(diagnostic, location)]
    properties: dict[str, Any] = {
        "confidence": str(getattr(diagnostic.confidence, "value", diagnostic.confidence)),
        "amplint/name": diagnostic.name,
    }
    if diagnostic.help:
        properties["amplint/help"] = diagnostic.help
    properties.update({f"amplint/{key}": value for key, value in diagnostic.extra.items()})
    result["properties"] = properties
    return result


def _root_uri(root: str | None) -> str | None:
    if not root:
        return None
    location = artifact_location(root)
    if "uriBaseId" in location:
        return None  # The spec wants an absolute URI here; a relative root would be invalid.
    uri = location["uri"]
    return uri if uri.endswith("/") else uri + "/"


def build(
    diagnostics: Sequence[Diagnostic],
    *,
    summary: ReportSummary | None = None,
    rules: Sequence[type[Rule]] | None = None,
) -> dict[str, Any]:
    """The SARIF log as a dict. `rules` defaults to the whole catalogue."""
    # Imported lazily: loading the catalogue imports every rule module.
    from amplint.rules import all_rules, help_uri

    catalogue = all_rules() if rules is None else rules
    descriptors: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    for rule in catalogue:
        if rule.code not in index:
            index[rule.code] = len(descriptors)
            descriptors.append(_rule_descriptor(rule, help_uri(rule)))
    for diagnostic in diagnostics:
        if diagnostic.code not in index:
            index[diagnostic.code] = len(descriptors)
            descriptors.append(_adhoc_descriptor(diagnostic))

    version = amplint_version()
    driver: dict[str, Any] = {"name": "amplint", "version": version, "informationUri": INFORMATION_URI}
    if _SEMVER.match(version):
        driver["semanticVersion"] = version
    driver["rules"] = descriptors

    run: dict[str, Any] = {"tool": {"driver": driver}}
    root = _root_uri(summary.root if summary else None)
    if root is not None:
        run["originalUriBaseIds"] = {SRCROOT: {"uri": root}}
    run["columnKind"] = "unicodeCodePoints"
    run["results"] = [_result(diagnostic, index[diagnostic.code]) for diagnostic in diagnostics]
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def render(
    diagnostics: Sequence[Diagnostic],
    *,
    summary: ReportSummary | None = None,
    rules: Sequence[type[Rule]] | None = None,
) -> str:
    log = build(diagnostics, summary=summary, rules=rules)
    return json.dumps(log, indent=2, ensure_ascii=False, default=json_default) + "\n"
