"""What of a file's text is code, by text: the spans of its docstrings and comments, and the names
its code uses. The project-wide pass (`amplint.static.modes`) reads every file of a project before
any is parsed, so it finds these with a scan, not a tokenizer."""

from __future__ import annotations

import bisect
import re

__all__ = ["BRACKETS", "code_words", "indent_at", "inside", "is_code", "string_spans"]

_WORD = re.compile(rb"[A-Za-z_]\w*")
_TRIPLE = re.compile(rb"\"\"\"|'''|#")
# On one line: a comment, or a string (its closing quote missing when it is still open at the end).
_LINE_NOISE = re.compile(rb"#|\"(?:[^\"\\]|\\.)*(?P<double>\")?|'(?:[^'\\]|\\.)*(?P<single>')?")


def string_spans(code: bytes, comments: bool = False) -> list[tuple[int, int]]:
    """The (start, end) offsets of the triple-quoted strings (their lines are no code), and with
    `comments`, of the comments."""
    spans: list[tuple[int, int]] = []
    at = 0
    while (match := _TRIPLE.search(code, at)) is not None:
        if match.group() == b"#":
            end = code.find(b"\n", match.end())
            at = len(code) if end < 0 else end
            if comments:
                spans.append((match.start(), at))
            continue
        close = code.find(match.group(), match.end())
        at = len(code) if close < 0 else close + 3
        spans.append((match.start(), at))
    return spans


def inside(spans: list[tuple[int, int]], offset: int) -> bool:
    index = bisect.bisect_right(spans, (offset, 1 << 62)) - 1
    return index >= 0 and spans[index][0] < offset < spans[index][1]


def is_code(code: bytes, start: int, line_start: int, docstrings: list[tuple[int, int]]) -> bool:
    """Whether offset `start` is code: in none of `docstrings` (`string_spans`), and on its line in
    no comment or string."""
    index = bisect.bisect_right(docstrings, (start, len(code))) - 1
    if index >= 0:
        _, end = docstrings[index]
        if start < end:
            return False
        line_start = max(line_start, end)  # a docstring closed earlier on this line
    for token in _LINE_NOISE.finditer(code, line_start, start):
        if token.group() == b"#" or token.lastgroup is None:
            return False  # a comment, or a string still open at `start`
    return True


def indent_at(code: bytes, line_start: int) -> int:
    """How many spaces and tabs the line at `line_start` starts with."""
    at = line_start
    while at < len(code) and code[at] in b" \t":
        at += 1
    return at - line_start


def code_words(code: bytes) -> set[bytes]:
    """The names `code` uses, less those only its docstrings, comments and signatures' annotations
    name: a type named for a parameter or a return (`def convert(model: GPT2LLM) -> GPT2Config`) is
    not run by the function."""
    kept, at = [], 0
    for start, end in string_spans(code, comments=True):  # docstrings and comments name what they like
        kept.append(code[at:start])
        at = end
    kept.append(code[at:])
    return set(_WORD.findall(_unannotated(b" ".join(kept))))


_DEF_HEAD = re.compile(rb"\bdef[ \t]+\w+[ \t]*\(")
BRACKETS = (b"([{", b")]}")  # what opens and closes a bracket
_OPEN, _CLOSE = BRACKETS
_QUOTES = b"\"'"


def _unannotated(code: bytes) -> bytes:
    """`code` with the annotations of each `def`'s parameters and return left out (defaults kept)."""
    pieces: list[bytes] = []
    at = 0
    for match in _DEF_HEAD.finditer(code):
        if match.start() < at:
            continue  # inside a signature already read (a `def` in a default's string)
        pieces.append(code[at : match.end()])
        i, depth, keep, default = match.end(), 1, match.end(), False
        while i < len(code) and depth:
            c = code[i]
            if c in _QUOTES:  # a string in a default: skipped whole
                end = code.find(code[i : i + 1], i + 1)
                i = len(code) if end < 0 else end
            elif c in _OPEN:
                depth += 1
            elif c in _CLOSE:
                depth -= 1
            elif depth == 1 and c == 58 and not default and keep >= 0:  # `:` starts an annotation
                pieces.append(code[keep:i])
                keep = -1
            elif depth == 1 and c in b",=":  # the next parameter, or a default: kept
                default = c == 61
                keep = i if keep < 0 else keep
            if not depth and keep < 0:
                keep = i  # the closing parenthesis
            i += 1
        if keep >= 0:
            pieces.append(code[keep:i])
        # `-> Returns:` after the parameters: left out up to the header's colon.
        arrow = re.match(rb"[ \t]*->[^:]*", code[i : i + 400])
        at = i + (arrow.end() if arrow else 0)
    pieces.append(code[at:])
    return b"".join(pieces)
