"""JUnit XML, which CI systems (GitLab's test report, Jenkins, Azure Pipelines, CircleCI) show as
test results: a test suite per checked file with findings, a failed test case per finding; a run
without findings is one passing test case, so that the report is never empty."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from itertools import groupby

from amplint.diagnostics import Diagnostic
from amplint.report import cell_position, confidence_note

# Characters XML 1.0 cannot hold at all, escaped or not; a message quoting odd source keeps the rest.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _case(diagnostic: Diagnostic) -> ET.Element:
    where = cell_position(diagnostic) if diagnostic.cell is not None else f"line {diagnostic.line}"
    case = ET.Element(
        "testcase",
        name=f"{diagnostic.code} {diagnostic.name} ({where}, column {diagnostic.column})",
        classname=_xml(diagnostic.path),
        file=_xml(diagnostic.path),
        line=str(diagnostic.file_line),
    )
    failure = ET.SubElement(case, "failure", message=_xml(diagnostic.message), type=diagnostic.code)
    lines = [f"{diagnostic.location}:{diagnostic.line}:{diagnostic.column}: {diagnostic.message}"]
    lines += [f"help: {diagnostic.help}"] if diagnostic.help else []
    note = confidence_note(diagnostic)
    lines += [note] if note is not None else []
    failure.text = _xml("\n".join(lines))
    return case


def render(diagnostics: Sequence[Diagnostic]) -> str:
    root = ET.Element("testsuites", name="amplint", tests="0", failures="0", errors="0")
    for path, group in groupby(diagnostics, key=lambda d: d.path):
        cases = [_case(diagnostic) for diagnostic in group]
        suite = ET.SubElement(
            root, "testsuite", name=_xml(path), tests=str(len(cases)), failures=str(len(cases)), errors="0"
        )
        suite.extend(cases)
    if not diagnostics:
        suite = ET.SubElement(root, "testsuite", name="amplint", tests="1", failures="0", errors="0")
        ET.SubElement(suite, "testcase", name="no findings", classname="amplint")
    total = max(len(diagnostics), 1)
    root.set("tests", str(total))
    root.set("failures", str(len(diagnostics)))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
