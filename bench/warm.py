"""memlint warm (every file's result already in its cache) over a corpus: the run a developer
makes again and again, and pays for whole each time.

    python bench/warm.py CORPUS [--root DIR] [--repeat N]

CORPUS is a folder, linted as a user lints it (`memlint --select ALL .` run in it: its
configurations and .gitignore files apply), or a list of files as bench/compare.py reads one,
named one by one on the command line. The cache, in a scratch folder, is filled by one untimed
run first. Printed: the medians of wall and CPU time (the process and its workers) over
--repeat runs, and the machine's load average.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from compare import REPO, corpus_files, measure


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="a folder, or a list of files (.txt, .tsv)")
    parser.add_argument("--root", type=Path, help="the folder a list's paths are relative to")
    parser.add_argument("--repeat", type=int, default=5, help="runs (medians reported)")
    args = parser.parse_args()
    compileall.compile_dir(str(REPO / "memlint"), quiet=1)  # as an installed memlint runs: compiled
    scratch = Path(tempfile.mkdtemp(prefix="memlint-warm-"))
    try:
        command = [sys.executable, "-m", "memlint", "--select", "ALL", "--exit-zero", "--cache-dir", str(scratch)]
        if args.corpus.is_dir():
            command.append(".")
            folder = args.corpus
        else:
            command += [str(path.resolve()) for path in corpus_files(args.corpus, args.root)]
            folder = REPO
        load = os.getloadavg()[0]
        measure(command, folder)  # fills the cache
        runs = [measure(command, folder) for _ in range(args.repeat)]
        print(f"corpus: {args.corpus}  runs: {args.repeat} (medians)  load average before/after: "
              f"{load:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        print(f"memlint warm: wall {statistics.median(r[0] for r in runs):.3f} s, "
              f"CPU {statistics.median(r[1] for r in runs):.3f} s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
