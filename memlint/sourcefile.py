"""Reading source files as text and writing fixed ones back, without losing a byte.

The encoding comes from the BOM or the PEP 263 cookie (UTF-8 otherwise) and newlines are kept
as they are (no translation), so an untouched line is written back byte for byte. Writes are
atomic: a temporary file in the same folder, then a rename, keeping the file's permissions.
"""

from __future__ import annotations

import io
import os
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


def read(path: Path) -> SourceText:
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise UnreadableFile("is a directory") from None
    except OSError as error:
        raise UnreadableFile(error.strerror or str(error)) from None
    if b"\x00" in data:
        raise UnreadableFile("binary file (contains NUL bytes), not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        raise UnreadableFile(f"bad encoding declaration: {error.msg}") from None
    try:
        return SourceText(data.decode(encoding), encoding)
    except (UnicodeDecodeError, LookupError):
        raise UnreadableFile(f"not valid {encoding} text") from None


def write_atomic(path: Path, source: SourceText) -> None:
    data = source.text.encode(source.encoding)
    mode = path.stat().st_mode & 0o7777
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".memlint")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
