"""How long memlint takes on a folder of real code, against a bare LibCST parse of the same files.

    python bench/lint_speed.py DIR [--repeat N]

Both run on one core over the same in-memory sources; the figures are medians of N runs.
memlint's target is a ratio of at most 1.5 (all default rules, against the bare parse).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import libcst

from memlint.config import Config
from memlint.engine import SourceError, check
from memlint.files import discover
from memlint.rules import registry


def _time(function, repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        timings.append(time.perf_counter() - start)
    return statistics.median(timings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    sources = []
    for path in discover([str(args.folder)], Config(root=args.folder)):
        try:
            sources.append((str(path), path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    parseable = []
    for path, text in sources:
        try:
            libcst.parse_module(text)
            parseable.append((path, text))
        except Exception:  # a file the bare parser rejects is left out of both sides
            continue
    lines = sum(text.count("\n") + 1 for _, text in parseable)
    rules = [rule for rule in registry().values() if rule.DEFAULT_ON]
    findings = []

    def bare() -> None:
        for _, text in parseable:
            libcst.parse_module(text)

    def lint() -> None:
        findings.clear()
        for path, text in parseable:
            try:
                findings.extend(check(text, path, rules).findings)
            except SourceError:
                pass

    bare_seconds = _time(bare, args.repeat)
    lint_seconds = _time(lint, args.repeat)
    mentioning = sum(1 for _, text in parseable if "torch" in text)
    print(f"folder: {args.folder}  files: {len(parseable)} ({mentioning} mention torch)  lines: {lines}")
    print(f"rules: {', '.join(r.CODE for r in rules)}  findings: {len(findings)}  runs: {args.repeat} (median)")
    print(f"{'':<22}{'seconds':>10}{'lines/s':>12}")
    print(f"{'libcst.parse_module':<22}{bare_seconds:>10.2f}{lines / bare_seconds:>12.0f}")
    print(f"{'memlint check':<22}{lint_seconds:>10.2f}{lines / lint_seconds:>12.0f}")
    print(f"ratio memlint / bare parse: {lint_seconds / bare_seconds:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
