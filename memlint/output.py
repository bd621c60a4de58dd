"""The command's standard output, whose write failures are the user's to hear of.

A report written to a full disk, or into a pipe whose reader is gone (`memlint . | head`), is
lost, and a run must not pass for one whose output arrived: such a failure ends the run with
one line on stderr and exit code 2, not a traceback, nor a silent exit 0. Only failures of the
output itself are turned into OutputFailed; any other OSError is left alone.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator, TextIO


class OutputFailed(Exception):
    """Standard output could not be written; the message is one line."""


class _Guarded:
    """A text stream whose write and flush raise OutputFailed instead of OSError."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            raise OutputFailed(_reason(error)) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            raise OutputFailed(_reason(error)) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _reason(error: OSError) -> str:
    return (error.strerror or str(error)).lower()


@contextmanager
def guarded_stdout() -> Iterator[None]:
    """sys.stdout guarded while the block runs, and flushed at its end (where a full disk or a
    closed pipe shows). After a failure, what is still buffered is dropped, so that Python's
    own flush at exit fails no more."""
    stream = sys.stdout
    sys.stdout = _Guarded(stream)  # type: ignore[assignment]
    try:
        yield
        sys.stdout.flush()
    except OutputFailed:
        _drop(stream)
        raise
    finally:
        sys.stdout = stream


def _drop(stream: TextIO) -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no descriptor (a StringIO): nothing to drop
        pass
