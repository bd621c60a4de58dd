"""Records this folder's memory snapshots on a CUDA GPU: `python tests/data/snapshots/record.py [OUT]`.

Each fixture named below runs in its own process, as `python before.py` would, with the CUDA
allocator's history on (Python stacks only, which keeps the files small), and its snapshot is
written as `torch.cuda.memory._dump_snapshot` writes one, then gzipped: `<fixture>.pickle.gz`.
tests/test_snapshot_recorded.py reads them with `memlint snapshot`.
"""

from __future__ import annotations

import gzip
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parents[2] / "fixtures"
RECORDED = {"MEM201-accumulate-history": 4, "MEM202-retained-outputs": 4}  # fixture: MEMLINT_SCALE


def record(fixture: str, out: Path) -> Path:
    """Runs one fixture's before.py in this process with the history on; the gzipped snapshot."""
    import torch

    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python")
    runpy.run_path(str(FIXTURES / fixture / "before.py"), run_name="__main__")
    with tempfile.TemporaryDirectory() as tmp:
        dumped = Path(tmp) / "snapshot.pickle"
        torch.cuda.memory._dump_snapshot(str(dumped))
        target = out / f"{fixture}.pickle.gz"
        target.write_bytes(gzip.compress(dumped.read_bytes(), mtime=0))
    return target


def main() -> int:
    if sys.argv[1:2] == ["--one"]:  # a child: one fixture
        _, _, fixture, scale, out = sys.argv
        os.environ["MEMLINT_SCALE"] = scale
        print(record(fixture, Path(out)))
        return 0
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    for fixture, scale in RECORDED.items():
        subprocess.run([sys.executable, __file__, "--one", fixture, str(scale), str(out)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
