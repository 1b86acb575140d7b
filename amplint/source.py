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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Line breaks as Python's tokenizer counts them (not str.splitlines, which also splits on \f etc.).
NEWLINE = re.compile(r"\r\n|\r|\n")
# An identifier-like word: what rules' trigger words are matched against.
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
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
    """The most frequent line break; of equally frequent ones, the first in the text."""
    crlf = text.count("\r\n")
    counts = {"\r\n": crlf, "\r": text.count("\r") - crlf, "\n": text.count("\n") - crlf}
    present = {newline for newline, count in counts.items() if count}
    first: list[str] = []  # each kind present, in the order of its first occurrence
    for match in NEWLINE.finditer(text):
        if match.group() not in first:
            first.append(match.group())
            if len(first) == len(present):
                break
    return max(first, key=counts.__getitem__) if first else "\n"


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


def display_path(path: Path | str) -> str:
    """The path as reports show it: relative to the working directory when below it, POSIX style.
    String operations only (no `Path` objects): the project-wide pass names every file of a project."""
    text = os.fspath(path)
    if os.path.isabs(text):
        cwd = os.getcwd()
        if text != cwd and not text.startswith(cwd.rstrip(os.sep) + os.sep):
            return text.replace(os.sep, "/")
        text = text[len(cwd) :].lstrip(os.sep)
    return os.path.normpath(text).replace(os.sep, "/")


class WriteRefused(Exception):
    """A file amplint will not write; the message says why, for the user."""


def within(path: str, folder: str) -> bool:
    """Whether the absolute path `path` is `folder` or below it."""
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:  # on two drives (Windows)
        return False


def escapes(path: Path, roots: Sequence[Path]) -> Path | None:
    """Where a write to `path` would really land, when `path` lies inside one of `roots` but that
    place lies outside all of them (a symbolic link, of the file or of a folder on its way, leads
    out); None otherwise. A path outside every root is one the user named there: not an escape."""
    if not any(within(os.path.abspath(path), os.path.abspath(root)) for root in roots):
        return None
    real = os.path.realpath(path)
    if any(within(real, os.path.realpath(root)) for root in roots):
        return None
    return Path(real)


def replace_file(
    path: Path, data: bytes, *, expected: bytes | None = None, roots: Sequence[Path] | None = None
) -> None:
    """Write `data` to `path` so that nothing is lost: readers see the old or the new bytes, never a
    mix, and the file keeps its mode, owner, group and hard links. A link's target is written, not
    the link; a new file gets the mode the umask gives.

    An existing file without write permission is left alone; with `expected` (the bytes the caller
    read and changed), a file is written only if it still holds them, checked under an exclusive
    lock that another amplint writing the same file also takes, and again (inode, size, modification
    time and bytes) once the new bytes are complete beside it, just before they replace it. Each
    raises WriteRefused. The new bytes are always written whole to a copy first: a full disk fails
    that copy, never the file, and an error that leaves the copy names it. With `roots` (the folders
    being checked and the project's), a file whose real place lies outside them is left alone
    (WriteRefused)."""
    if roots is not None and (target := escapes(path, roots)) is not None:
        raise WriteRefused(f"a symbolic link leads to {target}, outside the checked folders; left as it is")
    path = path.resolve() if path.is_symlink() else path
    try:
        handle = open(path, "rb")  # noqa: SIM115 - held for the lock, closed below
    except FileNotFoundError:
        if expected is not None:
            raise WriteRefused("deleted since it was read; not written again") from None
        tmp = _temporary(path, data, 0o666 & ~current_umask())
        _swap(tmp, lambda: os.replace(tmp, path))
        return
    with handle:
        _lock(handle)
        st = os.fstat(handle.fileno())
        if not st.st_mode & 0o222:
            raise WriteRefused("read-only (no write permission); left as it is")
        original = handle.read()
        if expected is not None and original != expected:
            raise WriteRefused("changed on disk since it was read; left as it is")
        # A rename would break hard links or give the file to us: those are rewritten in place.
        in_place = st.st_nlink > 1 or (st.st_uid, st.st_gid) != (_EUID, _EGID)
        tmp = _temporary(path, data, 0o600 if in_place else stat.S_IMODE(st.st_mode))

        def write() -> None:
            _unchanged(path, st, original)
            if in_place:
                _in_place(path, data, original, st, tmp)
            else:
                os.replace(tmp, path)

        _swap(tmp, write)


def current_umask() -> int:
    """The process's umask (reading it means setting it: set back at once)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


_EUID = os.geteuid() if hasattr(os, "geteuid") else -1
_EGID = os.getegid() if hasattr(os, "getegid") else -1


def _lock(handle: io.BufferedReader) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory locks, the content check remains
        return
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)


def _temporary(path: Path, data: bytes, mode: int) -> str:
    """A complete, synced and verified copy of `data` beside `path`; an OSError that says so when it
    cannot be made (a full disk), with nothing left behind."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".amplint")
    except OSError as exc:
        raise OSError(f"cannot make a copy beside it ({exc.strerror or exc}); left as it is") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if Path(tmp).read_bytes() != data:
            raise WriteRefused("the copy written beside it reads back wrong; left as it is")
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(
            f"cannot write the new content beside it ({exc.strerror or exc}); left as it is"
        ) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


class _Kept(OSError):
    """A failed write whose fixed copy is kept, at the path it names."""


def _swap(tmp: str, write: Callable[[], None]) -> None:
    """Run `write`, which puts the copy at `tmp` in place; the copy is removed whatever happens,
    unless the error says where it is kept."""
    kept = False
    try:
        write()
    except _Kept:
        kept = True
        raise
    finally:
        if not kept:
            Path(tmp).unlink(missing_ok=True)


def _unchanged(path: Path, before: os.stat_result, original: bytes) -> None:
    """The compare of compare-and-swap: the file is the one that was read (inode, size, modification
    time, and its bytes, as a save within one tick of the clock keeps the time), checked once the new
    bytes are complete and just before they replace it."""
    try:
        now = os.stat(path)
        same = (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) == (
            before.st_dev,
            before.st_ino,
            before.st_size,
            before.st_mtime_ns,
        )
        if same and path.read_bytes() == original:
            return
    except FileNotFoundError:
        raise WriteRefused("deleted while the fix was written; not written again") from None
    raise WriteRefused("changed on disk while the fix was written; left as it is")


def _in_place(path: Path, data: bytes, original: bytes, st: os.stat_result, tmp: str) -> None:
    """Write through the file's own inode (its links, owner and group stay). Only when the disk has
    room for what the file grows by, so that the write cannot stop half way for want of space; if it
    fails anyway, the old bytes are put back, and if even that fails the new ones are kept at `tmp`."""
    fd = os.open(path, os.O_WRONLY)
    try:
        if hasattr(os, "fstatvfs"):  # POSIX, where the blocks a file holds and those free are known
            fs = os.fstatvfs(fd)
            block = fs.f_frsize or 4096
            grows = -(-len(data) // block) * block - st.st_blocks * 512
            if grows > fs.f_bavail * fs.f_frsize:
                raise WriteRefused(
                    f"not enough free space to rewrite it in place ({grows} more bytes); left as it is"
                )
        try:
            _write_all(fd, data)
        except OSError as exc:
            try:
                _write_all(fd, original)
            except OSError:
                raise _Kept(
                    f"could not rewrite it in place ({exc.strerror or exc}) nor put its old content "
                    f"back; the fixed content is kept in {tmp}"
                ) from None
            raise OSError(f"could not rewrite it in place ({exc.strerror or exc}); left as it was") from None
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """`data` as the whole content of the open file `fd`, synced."""
    view = memoryview(data)
    os.lseek(fd, 0, os.SEEK_SET)
    while view:
        view = view[os.write(fd, view) :]
    os.ftruncate(fd, len(data))
    os.fsync(fd)


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
