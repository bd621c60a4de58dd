"""Reading source files as text and writing fixed ones back, without losing a byte.

The encoding comes from the BOM or the PEP 263 cookie (UTF-8 otherwise) and newlines are kept
as they are (no translation), so an untouched line is written back byte for byte. Only regular
files are read: a FIFO or a device could block the run or never end. Nor is a file larger than
any hand-written code (MAX_SOURCE_BYTES): parsing it would take hundreds of times its size in
memory; it is skipped with a warning (TooLarge), unread.

A fix is written to the file itself, through any symbolic link, and keeps what the user sees
of it: owner, group, mode and hard links. When it can, it is atomic (a temporary file in the
same folder, synced, then renamed over the file, with the owner and mode copied); a file with
other hard links, or whose owner or group the user cannot give a new file, is overwritten in
place instead, since a rename would split its links or change its owner. A file the user may
not write is refused, as the user's own `open()` would refuse it.

A fix is made from the bytes read at the start of a run, and someone may save the file while
memlint works: it is written only if the file still holds those bytes, checked once more right
before the rename (or the overwrite), so that an edit saved meanwhile is never replaced by the
fixed old text; a file deleted or moved meanwhile is not brought back. An overwrite in place
has a way back: the space it needs is reserved first, and on any failure (a full disk cutting
the write short) the original bytes are put back.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Tuple


class UnreadableFile(Exception):
    """The file cannot be read as Python source; the message is one line."""


class TooLarge(UnreadableFile):
    """The file is too large to lint: skipped with a warning, not failed."""


MAX_SOURCE_BYTES = 4 * 2**20  # the largest file of a 2,739-file corpus of real code has 236 KB
MAX_NOTEBOOK_BYTES = 64 * 2**20  # a notebook holds its outputs (images) too


@dataclass(frozen=True)
class SourceText:
    text: str
    encoding: str
    digest: str = ""  # of the bytes read (see `digest`); empty for a text not read from a file


def digest(data: bytes) -> str:
    """What a file's bytes are compared by, to tell whether it changed since it was read."""
    return hashlib.sha256(data).hexdigest()


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


def read_bytes(path: Path, limit: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (else TooLarge); anything else is
    refused before it is read, and checked again on the open descriptor (O_NONBLOCK: a FIFO
    that appeared meanwhile opens at once)."""
    try:
        kind = os.stat(path).st_mode
        if stat.S_ISREG(kind):
            handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            with os.fdopen(handle, "rb") as file:
                info = os.fstat(file.fileno())
                kind = info.st_mode
                if stat.S_ISREG(kind) and info.st_size > limit:
                    raise TooLarge(f"not linted: {info.st_size / 2**20:.1f} MiB, more than the "
                                   f"{limit // 2**20} MiB memlint reads")
                if stat.S_ISREG(kind):
                    return file.read()
    except OSError as error:
        raise UnreadableFile((error.strerror or str(error)).lower()) from None
    raise UnreadableFile("is a directory" if stat.S_ISDIR(kind) else f"{_kind(kind)}, not a source file")


def read(path: Path) -> SourceText:
    return decode(read_bytes(path, MAX_SOURCE_BYTES))


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
        return SourceText(data.decode(encoding), encoding, digest(data))
    except (UnicodeDecodeError, LookupError):
        raise UnreadableFile(_not_text(data, encoding)) from None


class UnwritableFile(OSError):
    """The user may not write the file; nothing was written."""


class FileChanged(Exception):
    """The file is not what was read any more (edited, replaced, moved or deleted since):
    nothing was written. The message is one line."""


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _writable(path: str) -> bool:
    if os.access in os.supports_effective_ids:
        return os.access(path, os.W_OK, effective_ids=True)
    return os.access(path, os.W_OK)


def _current(path: str) -> Tuple[bytes, os.stat_result]:
    """The bytes `path` holds now, and the identity of the file that holds them."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC)
    except FileNotFoundError:
        raise FileChanged("it was deleted or moved while memlint ran") from None
    with os.fdopen(handle, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise FileChanged("it was replaced by something that is not a file while memlint ran")
        return file.read(), info


def _still(path: str, info: os.stat_result, expected: str) -> None:
    """FileChanged unless `path` still holds the bytes whose digest is `expected`: the same file,
    size and modification time as when they were compared, or else the same bytes."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        raise FileChanged("it was deleted or moved while memlint ran") from None
    same = (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) == \
        (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    if not same and digest(_current(path)[0]) != expected:
        raise FileChanged("it was edited while memlint ran")


def _replace(path: str, data: bytes, info: os.stat_result, expected: str) -> bool:
    """Write atomically: a synced temporary file with the original's owner and mode, renamed
    over it if the file is still unchanged. False (nothing changed) when the folder takes no
    new file or the owner or group cannot be given to one."""
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
        _still(path, info, expected)
        os.replace(temporary, path)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise
    return True


def _put(handle: int, data: bytes) -> None:
    """`data` as the whole content of the open file, synced."""
    os.lseek(handle, 0, os.SEEK_SET)
    view = memoryview(data)
    while view:
        view = view[os.write(handle, view):]
    os.ftruncate(handle, len(data))
    os.fsync(handle)


def _reserve(handle: int, size: int, original: int) -> None:
    """Make sure the disk holds `size` bytes for the file before any is changed, where the
    file system can say (a full disk then fails here, with the file as it was)."""
    if size <= original or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(handle, 0, size)
    except OSError as error:
        os.ftruncate(handle, original)  # the size it may have been given, taken back
        if error.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):  # not a file system that says
            raise


def _overwrite(path: str, data: bytes, expected: str) -> None:
    """Write into the file's own inode: owner, group, mode and every hard link stay. The bytes
    are compared on the open file right before; the space is reserved first; on any failure the
    original bytes are put back, and if even that fails, the error says so."""
    with os.fdopen(os.open(path, os.O_RDWR | os.O_NONBLOCK | _CLOEXEC), "r+b", buffering=0) as file:
        handle = file.fileno()
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            raise FileChanged("it was replaced by something that is not a file while memlint ran")
        original = file.read()
        if digest(original) != expected:
            raise FileChanged("it was edited while memlint ran")
        _reserve(handle, len(data), len(original))
        try:
            _put(handle, data)
        except BaseException as failure:
            try:
                _put(handle, original)
            except OSError as error:
                raise OSError(error.errno, f"{error.strerror or error}, and the file could not be put back as "
                                           f"it was: it may be damaged") from failure
            raise


def write_back(path: Path, source: SourceText, expected: str) -> None:
    """Write `source` into the file `path` names (the target, if it is a symbolic link), if it
    still holds the bytes whose digest is `expected` (else FileChanged, nothing written)."""
    real = os.path.realpath(path)
    now, info = _current(real)
    if digest(now) != expected:
        raise FileChanged("it was edited while memlint ran")
    if not _writable(real):
        raise UnwritableFile(errno.EACCES, "permission denied")
    data = source.text.encode(source.encoding)
    if info.st_nlink > 1 or not _replace(real, data, info, expected):
        _overwrite(real, data, expected)
