"""Parts of real projects linted on their own, as pre-commit lints the files that changed.

    python bench/subsets.py DIR [--rounds N] [--seed S] [--same-ways]

DIR holds one folder per repository (the corpus built as ../shared/corpus says). Each round
picks a repository and a random part of its files (1 to 60, with one of its packages'
`__init__.py` in half the rounds: the module that re-exports the others), and lints that part
alone, every rule on, in the repository's folder as its configuration finds it. Printed: each
round that crashed, ran past its time (3 s a file, 30 s at least) or its memory (4 GB), or
reported a finding (file, line, rule) that the whole repository linted as one project does not:
a part knows less of the project than the whole, and must never report more. `--same-ways`
also lints each part with 2 jobs and from a cache (filled, then read), and prints each round
whose output differs from the first run's by a byte.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

from compare import corpus_files

Finding = Tuple[str, int, str]
MEMLINT = [sys.executable, "-m", "memlint", "--select", "ALL", "--exit-zero", "--output-format", "json"]
PART_SIZES = (1, 2, 3, 5, 8, 13, 30, 60)


def python_files(repository: Path) -> List[str]:
    """The files memlint lints in the folder (its own discovery, the folder's configuration's
    excludes applied), relative to it: a part holds none the whole leaves out."""
    return sorted(str(path.relative_to(repository)) for path in corpus_files(repository, None))


def findings(output: str) -> Set[Finding]:
    return {(f["filename"], f["line"], f["code"]) for f in json.loads(output)}


def lint(repository: Path, files: Sequence[str], *options: str, count: int = 0) -> Tuple[Optional[str], str]:
    """(the JSON printed, or None; what went wrong, or ""). Its time: 3 s a file (`count` files,
    else those named), 30 s at least."""
    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    try:
        done = subprocess.run([*MEMLINT, *options, *files], cwd=repository, capture_output=True, text=True,
                              timeout=max(30, 3 * (count or len(files))), preexec_fn=capped)
    except subprocess.TimeoutExpired:
        return None, "past its time"
    if done.returncode != 0:
        return None, f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    return done.stdout, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1, help="the first round's seed (each round has its own)")
    parser.add_argument("--same-ways", action="store_true", help="also -j 2, and a cache filled then read")
    args = parser.parse_args()

    repositories = sorted(p for p in args.folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    whole: Dict[Path, Set[Finding]] = {}
    troubles = 0
    for seed in range(args.seed, args.seed + args.rounds):
        chance = random.Random(seed)
        repository = chance.choice(repositories)
        files = python_files(repository)
        part = chance.sample(files, min(len(files), chance.choice(PART_SIZES)))
        packages = [f for f in files if f.endswith("__init__.py")]
        if packages and chance.random() < 0.5:
            part = sorted(set(part) | {chance.choice(packages)})
        started = time.perf_counter()
        output, trouble = lint(repository, part, "--no-cache", "-j", "1")
        seconds = time.perf_counter() - started
        if output is not None:
            if repository not in whole:
                everything, failed = lint(repository, ["."], "--no-cache", "-j", "1", count=len(files))
                if everything is None:
                    raise SystemExit(f"{repository.name} as a whole: {failed}")
                whole[repository] = findings(everything)
            more = sorted(findings(output) - whole[repository])
            trouble = f"reports what the whole project does not: {more}" if more else ""
        if output is not None and not trouble and args.same_ways:
            cache = tempfile.mkdtemp(prefix="memlint-subsets-")
            try:
                for options in (("--no-cache", "-j", "2"), ("--cache-dir", cache, "-j", "2"),
                                ("--cache-dir", cache, "-j", "1")):
                    again, _ = lint(repository, part, *options)
                    if again != output:
                        trouble = f"{' '.join(options[-2:])}{' (cache)' if cache in options else ''} prints another output"
                        break
            finally:
                shutil.rmtree(cache, ignore_errors=True)
        if trouble:
            troubles += 1
            print(f"seed {seed}: {repository.name}, {len(part)} files, {seconds:.1f} s: {trouble}")
            print("    " + " ".join(part))
    print(f"{args.rounds} rounds, {troubles} with trouble")
    return 1 if troubles else 0


if __name__ == "__main__":
    sys.exit(main())
