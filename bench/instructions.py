"""memlint's cost in instructions, against a bare LibCST parse of the same files.

    python bench/instructions.py FILES [--root DIR] [--every N] [--select ALL]

FILES is a folder or a list of files, one a line (a `.tsv` takes its first column and skips a
`path` header), relative to --root (default: the list's folder); `--every 3` takes every third. Each
contender runs once under `valgrind --tool=callgrind` (instructions do not move with the
machine's load, as seconds do): a bare `libcst.parse_module` of every file, memlint's floor
(its syntax gate and the parse of each file a rule wants, no rule) and memlint itself, cold,
with one job (`-j 1 --file-timeout 0 --no-cache`), its worker process counted too, the files given together as one
project. memlint's bytecode is compiled first, as an installed memlint has it. Printed: each
contender's instructions and its ratio to the bare parse.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import FLOOR, PARSE, REPO, corpus_files  # noqa: E402


def instructions(command: List[str], folder: Path) -> int:
    """What callgrind counts for `command`: its whole process, start-up included, and every
    process it starts (memlint lints in a worker process even with `-j 1`, under a memory
    budget).

    A forked child inherits callgrind's counts of its parent up to the fork, so summing the
    processes' totals would count the parent's start-up twice. Dumping the counts right before
    each fork (which also zeroes them) makes each instruction appear in exactly one dump. Every
    contender imports this tree's memlint (the floor's script runs from a temporary folder,
    where an installed memlint would otherwise answer)."""
    subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes", "--dump-before=fork",
                    f"--callgrind-out-file={folder}/callgrind.out.%p", *command],
                   check=True, capture_output=True, cwd=REPO,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(REPO)})
    total = 0
    for out in folder.glob("callgrind.out.*"):
        match = re.search(r"^summary:\s*(\d+)", out.read_text(), re.MULTILINE)
        out.unlink()
        if match is None:
            raise SystemExit(f"callgrind wrote no summary in {out.name}")
        total += int(match.group(1))
    if not total:
        raise SystemExit("callgrind wrote no summary")
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path)
    parser.add_argument("--root", type=Path)
    parser.add_argument("--every", type=int, default=1)
    parser.add_argument("--select", default="ALL")
    args = parser.parse_args()
    files = [f.resolve() for f in corpus_files(args.files, args.root)[::args.every]]  # (run from this tree)
    compileall.compile_dir(str(REPO / "memlint"), quiet=1)
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        listing = folder / "files.txt"
        listing.write_text("\n".join(str(f) for f in files) + "\n")
        for name, code in (("parse", PARSE), ("floor", FLOOR)):
            (folder / f"{name}.py").write_text(code)
        counts = {
            "bare parse": instructions([sys.executable, str(folder / "parse.py"), str(listing)], folder),
            "memlint floor": instructions([sys.executable, str(folder / "floor.py"), str(listing)], folder),
            "memlint": instructions([sys.executable, "-m", "memlint", "--no-cache", "-j", "1", "--file-timeout",
                                     "0", "--select", args.select, "--exit-zero", *map(str, files)], folder),
        }
    lines = sum(f.read_bytes().count(b"\n") for f in files)
    print(f"{len(files)} files, {lines:,} lines")
    print("| run | instructions | ratio to the bare parse |\n| --- | ---: | ---: |")
    for name, count in counts.items():
        print(f"| {name} | {count / 1e9:.2f} G | {count / counts['bare parse']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
