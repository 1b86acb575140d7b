"""Reading a file into text without losing what is needed to write it back unchanged."""

from __future__ import annotations

import ast
import codecs
import io
import os
import re
import stat
import tempfile
import tokenize
import warnings
from dataclasses import dataclass
from pathlib import Path

# Line breaks as Python's tokenizer counts them (not str.splitlines, which also splits on \f etc.).
NEWLINE = re.compile(r"\r\n|\r|\n")
# A NUL byte does not occur in Python source; its presence marks a binary file.
_BINARY_PROBE = 8192


def python_ast(
    text: str, filename: str = "<amplint>", *, compiled: bool = False, feature_version: int = -1
) -> ast.Module:
    """The file parsed by Python's own parser (fast, C), as `compile` raises on it (SyntaxError,
    ValueError for NUL bytes, RecursionError, MemoryError); with `compiled`, also compiled from the
    tree, which raises on what only the compiler refuses (`return` outside a function, a late
    `from __future__ import`). `feature_version` (a minor version of Python 3): parsed in that older
    grammar, as `ast.parse` does. The file's own SyntaxWarnings (`1if x`, "\\d") are not amplint's
    to print."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = compile(
            text,
            filename,
            "exec",
            flags=ast.PyCF_ONLY_AST,
            dont_inherit=True,
            _feature_version=feature_version,
        )
        assert isinstance(tree, ast.Module)
        if compiled:
            compile(tree, filename, "exec", dont_inherit=True)
    return tree


def python_compiles(text: str, filename: str) -> None:
    """Compile the file as `python` would, raising as `compile` does; cheaper than `python_ast`,
    which builds the syntax tree as Python objects."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compile(text, filename, "exec", dont_inherit=True)


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

    @classmethod
    def of_text(cls, text: str, path: Path) -> SourceFile:
        """Text that is already decoded (an editor's buffer, a string): its coding cookie said how
        the bytes were read and has no say over the text; encoded back as UTF-8 if ever written."""
        return cls(path=path, text=text, encoding="utf-8", bom=False, newline=dominant_newline(text))


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


class FileTooLarge(SourceError):
    """A file over the size amplint may read (`max-file-size`), found from its size before reading."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(too_large_message(size, limit))
        self.size = size
        self.limit = limit


def too_large_message(size: int, limit: int) -> str:
    return (
        f"file too large to check ({_size(size)}, over max-file-size {_size(limit)}); "
        "raise max-file-size in [tool.amplint] to check it"
    )


def _size(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} KB"


def read_bytes(path: Path, limit: int | None = None) -> bytes:
    """The file's bytes; a SourceError saying why when it cannot be read. Reading is bounded before it
    starts: a file over `limit` bytes is refused from its size (FileTooLarge), and what is not a
    regular file (a device, a pipe, a socket, a link into /dev) is never read, so that no file, by
    its size or its kind, can make amplint read without end."""
    try:
        if os.path.realpath(path).startswith("/dev/"):
            raise SourceError("a device (its path leads into /dev), not a source file; not read")
        # Non-blocking: opening a named pipe would wait for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise SourceError("is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise SourceError("not a regular file (a device, pipe or socket); not read")
            if limit is not None and st.st_size > limit:
                raise FileTooLarge(st.st_size, limit)
            data = handle.read(-1 if limit is None else limit + 1)
    except PermissionError:
        raise SourceError("permission denied") from None
    except IsADirectoryError:
        raise SourceError("is a directory") from None
    except OSError as exc:
        raise SourceError(exc.strerror or str(exc)) from None
    if limit is not None and len(data) > limit:  # it grew since it was measured
        raise FileTooLarge(len(data), limit)
    return data


def read_source(path: Path, limit: int | None = None) -> SourceFile:
    return decode_source(read_bytes(path, limit), path)


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


class WriteRefused(Exception):
    """A file amplint will not write; the message says why, for the user."""


def replace_file(path: Path, data: bytes, *, expected: bytes | None = None) -> None:
    """Write `data` to `path` so that nothing is lost: readers see the old or the new bytes, never a
    mix, and the file keeps its mode, owner, group and hard links. A link's target is written, not
    the link; a new file gets the mode the umask gives.

    An existing file without write permission is left alone; with `expected` (the bytes the caller
    read and changed), a file is written only if it still holds them, checked under an exclusive
    lock that another amplint writing the same file also takes. Both raise WriteRefused."""
    path = path.resolve() if path.is_symlink() else path
    try:
        handle = open(path, "rb")  # noqa: SIM115 - held for the lock, closed below
    except FileNotFoundError:
        if expected is not None:
            raise WriteRefused("deleted since it was read; not written again") from None
        _renamed(path, data, None)
        return
    with handle:
        _lock(handle)
        st = os.fstat(handle.fileno())
        if not st.st_mode & 0o222:
            raise WriteRefused("read-only (no write permission); left as it is")
        if expected is not None and path.read_bytes() != expected:
            raise WriteRefused("changed on disk since it was read; left as it is")
        if st.st_nlink > 1 or (st.st_uid, st.st_gid) != (_EUID, _EGID):
            _in_place(path, data)  # a rename would break the links or give the file to us
        else:
            _renamed(path, data, stat.S_IMODE(st.st_mode))


_EUID = os.geteuid() if hasattr(os, "geteuid") else -1
_EGID = os.getegid() if hasattr(os, "getegid") else -1


def _lock(handle: io.BufferedReader) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory locks, the content check remains
        return
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)


def _temporary(path: Path, data: bytes, mode: int) -> str:
    """A complete, synced copy of `data` beside `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".amplint")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def _renamed(path: Path, data: bytes, mode: int | None) -> None:
    if mode is None:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    tmp = _temporary(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _in_place(path: Path, data: bytes) -> None:
    """Write through the file's own inode (its links, owner and group stay), after a verified copy
    beside it that is kept if the write fails, so that the new bytes are never lost."""
    tmp = _temporary(path, data, 0o600)
    if Path(tmp).read_bytes() != data:
        Path(tmp).unlink(missing_ok=True)
        raise WriteRefused("could not make a verified copy beside it; left as it is")
    with open(path, "r+b") as handle:
        handle.write(data)
        handle.truncate()
        handle.flush()
        os.fsync(handle.fileno())
    Path(tmp).unlink()


def shown_lines(text: str, lines: set[int]) -> str:
    """`text` with every line but `lines` emptied: the same line numbers, a fraction of the bytes
    (what a run keeps of a file with findings, for the one-line snippets of its report)."""
    return "\n".join(line if number in lines else "" for number, line in enumerate(NEWLINE.split(text), 1))


def source_line(text: str | None, line: int) -> str | None:
    """Line `line` (1-based) of `text`, without its line end, for a report's snippet; "" just past
    the last line (a span may point there, e.g. at a missing final newline), None where there is no
    such line or no text."""
    if text is None or line < 1:
        return None
    lines = NEWLINE.split(text)
    # A trailing newline yields an empty last element that is not a real line.
    if lines and lines[-1] == "" and text:
        lines.pop()
    if line > len(lines):
        return "" if line == len(lines) + 1 else None
    return lines[line - 1]
