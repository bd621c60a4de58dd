"""A memory snapshot read as plain data.

`torch.cuda.memory._dump_snapshot` pickles dicts, lists, strings and numbers only. A pickle can
name any importable callable and so run code while it is read; this reader refuses every such
name, so a file that is not a plain snapshot fails to load instead of running anything. A
gzip-compressed snapshot (`.pickle.gz`, as people store big ones) is read as well.
"""

from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"


class SnapshotError(Exception):
    """A file that is not a readable snapshot; the message is one line."""


class _PlainData(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise SnapshotError(f"it is a pickle of more than plain data (it names {module}.{name}); "
                            "a memory snapshot holds only dicts, lists, strings and numbers")


def load(path: Path) -> dict:
    """The snapshot at `path`: a dict with "segments" and "device_traces". Raises SnapshotError."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SnapshotError(f"cannot read: {error.strerror or error}") from None
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            raise SnapshotError(f"not a readable gzip file: {error}") from None
    try:
        snapshot = _PlainData(io.BytesIO(data)).load()
    except SnapshotError:
        raise
    except Exception as error:  # any malformed pickle: one line, never a traceback
        raise SnapshotError(f"not a pickle: {type(error).__name__}: {error}") from None
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("segments", []), list) \
            or not isinstance(snapshot.get("device_traces", []), list) \
            or not ("segments" in snapshot or "device_traces" in snapshot):
        raise SnapshotError("not a memory snapshot: expected a dict with 'segments' and 'device_traces' "
                            "(torch.cuda.memory._dump_snapshot writes one)")
    return snapshot
