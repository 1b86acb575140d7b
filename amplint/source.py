"""Reading a file into text without losing what is needed to write it back unchanged."""

from __future__ import annotations

import codecs
import io
import os
import re
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path

# Line breaks as Python's tokenizer counts them (not str.splitlines, which also splits on \f etc.).
NEWLINE = re.compile(r"\r\n|\r|\n")
# A NUL byte does not occur in Python source; its presence marks a binary file.
_BINARY_PROBE = 8192


class SourceError(Exception):
    """The file cannot be read as Python text; the message says why, for the user."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


@dataclass(frozen=True)
class SourceFile:
    path: Path
    text: str
    encoding: str
    bom: bool
    newline: str

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data


def dominant_newline(text: str) -> str:
    counts: dict[str, int] = {}
    for match in NEWLINE.finditer(text):
        counts[match.group()] = counts.get(match.group(), 0) + 1
    return max(counts, key=lambda nl: counts[nl]) if counts else "\n"


def decode_source(raw: bytes, path: Path) -> SourceFile:
    if b"\0" in raw[:_BINARY_PROBE]:
        raise SourceError("binary file (contains NUL bytes), not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:
        if "invalid or missing encoding declaration" not in str(exc):
            raise SourceError(f"cannot decode: {exc}") from None
        # No usable coding cookie and a first or second line that is not UTF-8: decoding as
        # UTF-8 below says which byte, and where, instead of blaming line 1.
        encoding = "utf-8"
    bom = raw.startswith(codecs.BOM_UTF8)
    if encoding == "utf-8-sig":
        encoding = "utf-8"
    body = raw[len(codecs.BOM_UTF8) :] if bom else raw
    try:
        text = body.decode(encoding)
    except UnicodeDecodeError as exc:
        line_start = body.rfind(b"\n", 0, exc.start) + 1
        line = body[: exc.start].count(b"\n") + 1
        # Columns count characters: decode what precedes the bad byte on its line (it decodes).
        column = len(body[line_start : exc.start].decode(encoding, errors="replace")) + 1
        raise SourceError(
            f"cannot decode as {encoding}: {exc.reason} (byte 0x{body[exc.start]:02x})", line, column
        ) from None
    return SourceFile(path=path, text=text, encoding=encoding, bom=bom, newline=dominant_newline(text))


def read_bytes(path: Path) -> bytes:
    """The file's bytes; a SourceError saying why when it cannot be read."""
    try:
        return path.read_bytes()
    except PermissionError:
        raise SourceError("permission denied") from None
    except IsADirectoryError:
        raise SourceError("is a directory") from None
    except OSError as exc:
        raise SourceError(exc.strerror or str(exc)) from None


def read_source(path: Path) -> SourceFile:
    return decode_source(read_bytes(path), path)


class LineIndex:
    """Maps 1-based (line, column) positions in code points to offsets in the text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0]
        self.starts.extend(match.end() for match in NEWLINE.finditer(text))

    def offset(self, line: int, column: int) -> int:
        if line > len(self.starts):
            return len(self.text)
        return min(self.starts[line - 1] + column - 1, len(self.text))

    def line_text(self, line: int) -> str:
        start = self.starts[line - 1]
        end = self.starts[line] if line < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")


def display_path(path: Path) -> str:
    """The path as reports show it: relative to the working directory when below it, POSIX style."""
    if path.is_absolute():
        try:
            path = path.relative_to(Path.cwd())
        except ValueError:
            return path.as_posix()
    return Path(os.path.normpath(path)).as_posix()


def replace_file(path: Path, data: bytes) -> None:
    """Write `data` beside `path`, then rename it over `path`: readers see the old or the new file,
    never a mix. A link's target is replaced, not the link; an existing file keeps its mode, a new
    one gets the mode the umask gives."""
    path = path.resolve() if path.is_symlink() else path
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".amplint")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
