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


def with_noqa(text: str, codes_by_line: dict[int, set[str]]) -> tuple[str, list[int]]:
    """`text` with each line of `codes_by_line` (1-based) suppressing its codes: the codes join a
    `# noqa: ...` already there, else `  # noqa: CODES` ends the line, after any comment. A line
    that cannot end in a comment (it ends inside a multi-line string, or in a backslash) is left
    as it is and returned. Line endings are kept."""
    lines = text.splitlines(keepends=True)
    blocked = _lines_without_room(text)
    skipped: list[int] = []
    for number, codes in sorted(codes_by_line.items()):
        if not 0 < number <= len(lines) or number in blocked:
            skipped.append(number)
            continue
        line = lines[number - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        existing = list(_LINE_NOQA.finditer(body))
        if existing and existing[-1].group("codes") is None:
            continue  # a bare noqa comment covers every code already
        if existing:
            match = existing[-1]
            present = {c.upper() for c in _CODE.findall(match.group("codes"))}
            added = sorted(c for c in codes if c.upper() not in present)
            body = body[: match.end()] + "".join(f", {c}" for c in added) + body[match.end() :]
        else:
            body = body.rstrip() + "  # noqa: " + ", ".join(sorted(codes))
        lines[number - 1] = body + ending
    return "".join(lines), skipped


def _lines_without_room(text: str) -> set[int]:
    """Lines whose end is inside a string or after a line-continuation backslash: a comment added
    there would change the string or break the code."""
    import io
    import tokenize

    blocked: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.start[0] < token.end[0] and token.type != tokenize.NL:
                blocked.update(range(token.start[0], token.end[0]))  # a string over several lines
    except (tokenize.TokenError, SyntaxError):
        pass
    for number, line in enumerate(text.splitlines(), start=1):
        if line.rstrip().endswith("\\"):
            blocked.add(number)
    return blocked
