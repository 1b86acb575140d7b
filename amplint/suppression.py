"""`# noqa` on a line, `# amplint: noqa` for a whole file."""

from __future__ import annotations

import re

_FILE_NOQA = re.compile(r"#\s*amplint\s*:\s*noqa\b(?!\s*:)", re.IGNORECASE)
_LINE_NOQA = re.compile(r"#\s*noqa(?::[\s]*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_CODE = re.compile(r"[A-Z]+[0-9]+", re.IGNORECASE)


def file_is_exempt(text: str) -> bool:
    return _FILE_NOQA.search(text) is not None


def line_suppresses(line: str, code: str) -> bool:
    """Whether a source line's `# noqa` comment covers `code` (a bare `# noqa` covers all)."""
    if "noqa" not in line.lower():
        return False
    for match in _LINE_NOQA.finditer(line):
        codes = match.group("codes")
        if codes is None or code.upper() in {c.upper() for c in _CODE.findall(codes)}:
            return True
    return False
