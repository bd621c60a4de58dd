"""memlint against another version of itself, in CPU time, beside a bare LibCST parse.

    python bench/ab.py CORPUS --against TREE [--root DIR] [--repeat N] [--side-by-side]

TREE is a folder holding another version's `memlint/` package (`git worktree add /tmp/old
REV`). Each round times a bare parse of the corpus's files, this checkout's memlint and
TREE's, each cold with one job and every rule (`bench/compare.py`'s commands), and prints
their CPU times; at the end, the medians, their ratios to the bare parse, and in how many
rounds this checkout was the faster.

A shared machine moves a run's CPU time by a fifth from one minute to the next, more than
most changes save. Rounds pair the two versions under the same conditions; with
`--side-by-side` the three run at once, each in its own process on its own core, so
that whatever slows the machine slows all three alike (on a machine with three idle cores).
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from compare import PARSE, REPO, corpus_files


def _commands(files_list: Path, config: Path, trees: Dict[str, Path]) -> List[Tuple[str, List[str], Dict[str, str]]]:
    """(name, command, environment) of the bare parse and of each version's memlint."""
    inherited = os.environ.get("PYTHONPATH", "")
    names = files_list.read_text(encoding="utf-8").splitlines()
    found = [("bare parse", [sys.executable, "-c", PARSE, str(files_list)], dict(os.environ))]
    for name, tree in trees.items():
        path = os.pathsep.join(filter(None, (str(tree), inherited)))
        found.append((name, [sys.executable, "-m", "memlint", "--select", "ALL", "--exit-zero", "--config",
                             str(config), "--no-cache", "-j", "1", *names], dict(os.environ, PYTHONPATH=path)))
    return found


def _cpu(usage: "os.struct_rusage") -> float:  # type: ignore[name-defined]
    return usage.ru_utime + usage.ru_stime


def _round(commands: Sequence[Tuple[str, List[str], Dict[str, str]]], cwd: Path, side_by_side: bool) -> Dict[str, float]:
    """CPU seconds of each command, its children included, run one after the other or all at once."""
    times: Dict[str, float] = {}
    if not side_by_side:
        for name, command, env in commands:
            process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times[name] = _cpu(os.wait4(process.pid, 0)[2])
        return times
    running = {subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL).pid: name for name, command, env in commands}
    while running:
        pid, _, usage = os.wait4(-1, 0)
        if pid in running:
            times[running.pop(pid)] = _cpu(usage)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="a folder of .py files, or a list of files (as bench/compare.py)")
    parser.add_argument("--against", type=Path, required=True, help="a folder holding another version's memlint/")
    parser.add_argument("--root", type=Path, help="the folder a list's paths are relative to")
    parser.add_argument("--repeat", type=int, default=3, help="rounds")
    parser.add_argument("--side-by-side", action="store_true", help="run the three of a round at once")
    args = parser.parse_args()
    if not (args.against / "memlint" / "__init__.py").is_file():
        raise SystemExit(f"{args.against}: holds no memlint/ package")
    trees = {"memlint": REPO, "against": args.against.resolve()}
    for tree in trees.values():  # (bytecode compiled once, not by every run: bench/compare.py says why)
        compileall.compile_dir(str(tree / "memlint"), quiet=1)
    files = corpus_files(args.corpus, args.root)
    with tempfile.TemporaryDirectory(prefix="memlint-ab-") as scratch:
        config = Path(scratch, "pyproject.toml")
        config.write_text("[tool.memlint]\n")  # no user config leaks in
        files_list = Path(scratch, "files.txt")
        files_list.write_text("\n".join(str(f.resolve()) for f in files) + "\n", encoding="utf-8")
        commands = _commands(files_list, config, trees)
        rounds: List[Dict[str, float]] = []
        for index in range(args.repeat):
            rounds.append(_round(commands, Path(scratch), args.side_by_side))
            print(f"round {index + 1}: " + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in rounds[-1].items()),
                  flush=True)
    bare = statistics.median(r["bare parse"] for r in rounds)
    print(f"{len(files)} files, {'side by side' if args.side_by_side else 'one after the other'}, medians:")
    for name in rounds[0]:
        median = statistics.median(r[name] for r in rounds)
        print(f"  {name:10s} {median:7.2f} s  {median / bare:.3f}x the bare parse")
    faster = sum(r["memlint"] < r["against"] for r in rounds)
    print(f"this checkout faster than {args.against} in {faster} of {len(rounds)} rounds")


if __name__ == "__main__":
    main()
