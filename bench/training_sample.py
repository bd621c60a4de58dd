"""A seeded sample of training files from the real-code corpus, for reading by hand.

    python bench/training_sample.py CORPUS --seed N [--size 44] [--exclude LIST]

A *training file* does a step's work or hosts it: it is listed in the corpus's `loops.tsv` (a
training or evaluation loop), or it defines a method a framework or trainer loops over
(Lightning's `training_step`, HF Trainer's `compute_loss`, fairseq's `train_step`, a `fit` ...).
Tests are left out, and so are the files of `--exclude` (earlier samples, one path a line: a
sample the rules were developed on is no measure of them); a repository whose files were all
read before gives none. Every repository gets at least two files where it has them, the rest is drawn across all candidates, and the same seed always
draws the same files: a recall figure names its seed, and a fresh sample is a new seed.
"""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path
from typing import Dict, List

STEP_METHOD = re.compile(
    r"^\s*def (training_step|validation_step|test_step|predict_step|on_\w*batch_end|compute_loss|"
    r"prediction_step|evaluation_loop|train_step|valid_step|inference_step|fit|train_epoch|"
    r"eval_epoch|evaluate|train_one_epoch|validate)\(", re.MULTILINE)
PER_REPOSITORY = 2


def candidates(corpus: Path, loops: Path) -> Dict[str, List[str]]:
    """Training files per repository, as paths relative to the corpus."""
    found = set()
    for row in loops.read_text().splitlines()[1:]:
        found.add(row.split("\t")[0])
    for path in corpus.rglob("*.py"):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "torch" in text and STEP_METHOD.search(text):
            found.add(str(path.relative_to(corpus)))
    by_repository: Dict[str, List[str]] = {}
    for relative in sorted(found):
        parts = Path(relative).parts
        if any(p in ("tests", "test") or p.startswith("test_") for p in parts[1:]):
            continue
        if (corpus / relative).is_file():
            by_repository.setdefault(parts[0], []).append(relative)
    return by_repository


def sample(by_repository: Dict[str, List[str]], seed: int, size: int) -> List[str]:
    rng = random.Random(seed)
    chosen: List[str] = []
    rest: List[str] = []
    for repository in sorted(by_repository):
        files = list(by_repository[repository])
        rng.shuffle(files)
        chosen.extend(files[:PER_REPOSITORY])
        rest.extend(files[PER_REPOSITORY:])
    rng.shuffle(rest)
    chosen.extend(rest[:max(0, size - len(chosen))])
    return sorted(chosen)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--loops", type=Path, default=Path(__file__).resolve().parents[2] / "shared/corpus/loops.tsv")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--size", type=int, default=44)
    parser.add_argument("--exclude", type=Path, help="a list of files (one a line) to leave out")
    args = parser.parse_args()
    by_repository = candidates(args.corpus, args.loops)
    if args.exclude is not None:
        left_out = set(args.exclude.read_text().split())
        by_repository = {repository: [f for f in files if f not in left_out]
                         for repository, files in by_repository.items()}
    for relative in sample(by_repository, args.seed, args.size):
        print(relative)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
