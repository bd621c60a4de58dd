"""Reading source files as text and writing fixed ones back, without losing a byte.

The encoding comes from the BOM or the PEP 263 cookie (UTF-8 otherwise) and newlines are kept
as they are (no translation), so an untouched line is written back byte for byte. Only regular
files are read: a FIFO or a device could block the run or never end.

A fix is written to the file itself, through any symbolic link, and keeps what the user sees
of it: owner, group, mode and hard links. When it can, it is atomic (a temporary file in the
same folder, synced, then renamed over the file, with the owner and mode copied); a file with
other hard links, or whose owner or group the user cannot give a new file, is overwritten in
place instead, since a rename would split its links or change its owner. A file the user may
not write is refused, as the user's own `open()` would refuse it.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path


class UnreadableFile(Exception):
    """The file cannot be read as Python source; the message is one line."""


@dataclass(frozen=True)
class SourceText:
    text: str
    encoding: str


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.MULTILINE)
_CONTROL = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]")  # in no text file (ESC aside: colour codes)


def _not_text(data: bytes, encoding: str) -> str:
    if _CONTROL.search(data[:8192]):
        return "binary file (not text), not Python source"
    return f"not valid {encoding} text"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return f"is {name}"
    return "is not a regular file"


def read_bytes(path: Path) -> bytes:
    """The bytes of a regular file; anything else is refused before it is read, and checked
    again on the open descriptor (O_NONBLOCK: a FIFO that appeared meanwhile opens at once)."""
    try:
        kind = os.stat(path).st_mode
        if stat.S_ISREG(kind):
            handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            with os.fdopen(handle, "rb") as file:
                kind = os.fstat(file.fileno()).st_mode
                if stat.S_ISREG(kind):
                    return file.read()
    except OSError as error:
        raise UnreadableFile((error.strerror or str(error)).lower()) from None
    raise UnreadableFile("is a directory" if stat.S_ISDIR(kind) else f"{_kind(kind)}, not a source file")


def read(path: Path) -> SourceText:
    return decode(read_bytes(path))


def decode(data: bytes) -> SourceText:
    """Source bytes (a file's, standard input's) as text, in the encoding they declare."""
    if b"\x00" in data:
        raise UnreadableFile("binary file (contains NUL bytes), not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        if _COOKIE.search(b"\n".join(data.splitlines()[:2])):
            raise UnreadableFile(f"bad encoding declaration: {error.msg}") from None
        raise UnreadableFile(_not_text(data, "utf-8")) from None
    try:
        return SourceText(data.decode(encoding), encoding)
    except (UnicodeDecodeError, LookupError):
        raise UnreadableFile(_not_text(data, encoding)) from None


class UnwritableFile(OSError):
    """The user may not write the file; nothing was written."""


def _writable(path: str) -> bool:
    if os.access in os.supports_effective_ids:
        return os.access(path, os.W_OK, effective_ids=True)
    return os.access(path, os.W_OK)


def _replace(path: str, data: bytes, info: os.stat_result) -> bool:
    """Write atomically: a synced temporary file with the original's owner and mode, renamed
    over it. False (nothing changed) when the folder takes no new file or the owner or group
    cannot be given to one."""
    try:
        handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{os.path.basename(path)}.",
                                             suffix=".memlint")
    except PermissionError:
        return False
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            made = os.fstat(out.fileno())
            if (made.st_uid, made.st_gid) != (info.st_uid, info.st_gid):
                try:
                    os.fchown(out.fileno(), info.st_uid, info.st_gid)
                except PermissionError:
                    os.unlink(temporary)
                    return False
            os.fchmod(out.fileno(), stat.S_IMODE(info.st_mode))  # after chown, which clears set-id bits
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise
    return True


def _overwrite(path: str, data: bytes) -> None:
    """Write into the file's own inode: owner, group, mode and every hard link stay. The old
    bytes are replaced front to back, and the tail cut only once the new bytes are all in."""
    with os.fdopen(os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)), "wb") as out:
        out.write(data)
        out.truncate()
        out.flush()
        os.fsync(out.fileno())


def write_back(path: Path, source: SourceText) -> None:
    """Write `source` into the file `path` names (the target, if it is a symbolic link)."""
    real = os.path.realpath(path)
    if not _writable(real):
        raise UnwritableFile(errno.EACCES, "permission denied")
    info = os.stat(real)
    data = source.text.encode(source.encoding)
    if info.st_nlink > 1 or not _replace(real, data, info):
        _overwrite(real, data)
