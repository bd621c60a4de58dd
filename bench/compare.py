"""memlint's speed on a corpus, against a bare LibCST parse of the same files (and other linters).

    python bench/compare.py CORPUS [--root DIR] [--repeat N] [--jobs N] [--tools BIN] [--no-scaling]

CORPUS is a folder (its `*.py` files, walked as memlint walks) or a list of files, one a line
(a `.tsv` takes its first column and skips a `path` header), relative to --root (default: the
list's folder). Every contender runs as a fresh process over the same files, round after round
in turn (so a change in the machine's load hits each alike): a bare `libcst.parse_module` of
every file; memlint's floor (its syntax gate on every file and its parse of each file a rule
wants, without a rule: what any whole-file design pays); memlint cold with one job and with
--jobs; and memlint warm (its cache filled by an untimed run first). With --tools BIN (the bin folder of a separate environment holding them),
ruff, TorchFix, flake8 with TorchFix's plugin and Fixit run too, each where it is installed.

Printed: medians of wall time and of CPU time (the process and its workers: on a busy machine
the steadier of the two), lines per second, peak memory, and each ratio to the bare parse; then
a scaling table of memlint cold -j1 over the first 1k, 10k, 100k and all lines, whose lines/s
and peak memory should stay flat. The machine's load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
PARSE = """
import sys, libcst
for path in open(sys.argv[1], encoding="utf-8").read().splitlines():
    with open(path, "rb") as file:
        data = file.read()
    try:
        libcst.parse_module(data)
    except Exception:
        pass
"""

# What any whole-file design of memlint pays before its first rule runs: the syntax gate for
# every file and a LibCST parse of each file a rule wants (it has one of the rule's words; in
# a test module, a rule of tests that Python's AST shows may report), by memlint's own
# functions, in a process whose node classes are unguarded, as a worker of memlint's run is.
# Set against the bare parse, it is the lowest ratio memlint can reach.
FLOOR = """
import sys
from pathlib import Path
from memlint.analysis.testcode import is_test_file
from memlint.engine import SourceError, compiles, compiles_to_ast, parse, wanted_rules
from memlint.rules import registry
from memlint.sourcefile import UnreadableFile, read
from memlint.trusted_nodes import unguard
rules = list(registry().values())
unguard()
for path in open(sys.argv[1], encoding="utf-8").read().splitlines():
    try:
        source = read(Path(path)).text
        wanted = wanted_rules(source, rules, path)
        if is_test_file(path):
            module = compiles_to_ast(source, path)
            wanted = [rule for rule in wanted if rule.may_report(module)]
        else:
            compiles(source, path)
        if wanted:
            parse(source)
    except (SourceError, UnreadableFile):
        pass
"""


@dataclass
class Timing:
    wall: List[float] = field(default_factory=list)
    cpu: List[float] = field(default_factory=list)
    peak_mb: List[float] = field(default_factory=list)


def measure(command: Sequence[str], cwd: Path) -> Tuple[float, float, float]:
    """(wall seconds, CPU seconds of the process and the children it waited for, peak MB)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in (0, 1):
        raise SystemExit(f"{command[0]} ... exited {process.returncode}: run it by hand to see why")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def corpus_files(corpus: Path, root: Optional[Path]) -> List[Path]:
    if corpus.is_dir():
        sys.path.insert(0, str(REPO))
        from memlint.config import Config
        from memlint.files import discover

        return [Path(p) for p in discover([str(corpus)], Config(root=corpus)) if isinstance(p, Path)]
    base = root or corpus.parent
    files = []
    for line in corpus.read_text(encoding="utf-8").splitlines():
        name = line.split("\t")[0].strip()
        if name and not (corpus.suffix == ".tsv" and name == "path"):
            files.append(base / name)
    return files


def line_count(path: Path) -> int:
    with open(path, "rb") as file:
        return file.read().count(b"\n")


def contenders(files_list: Path, scratch: Path, jobs: int, tools: Optional[Path]) -> Dict[str, List[str]]:
    python = sys.executable
    memlint = [python, "-m", "memlint", "--select", "ALL", "--exit-zero", "--config", str(scratch / "pyproject.toml")]
    names = files_list.read_text(encoding="utf-8").splitlines()
    found = {
        "bare parse": [python, "-c", PARSE, str(files_list)],
        "memlint floor": [python, "-c", FLOOR, str(files_list)],
        "memlint cold -j1": [*memlint, "--no-cache", "-j", "1", *names],
        f"memlint cold -j{jobs}": [*memlint, "--no-cache", "-j", str(jobs), *names],
        "memlint warm": [*memlint, "--cache-dir", str(scratch / "cache"), *names],
    }
    if tools is not None:
        for name, command in (("ruff", ["ruff", "check", "--select", "ALL", "--no-cache", "--exit-zero", "--quiet"]),
                              ("torchfix", ["torchfix", "--select", "ALL"]),
                              ("flake8 + torchfix", ["flake8", "--select", "TOR", "--exit-zero"]),
                              ("fixit", ["fixit", "lint"])):
            if (tools / command[0]).exists():
                found[name] = [str(tools / command[0]), *command[1:], *names]
    return found


def table(results: Dict[str, Timing], lines: int) -> List[str]:
    bare_wall = statistics.median(results["bare parse"].wall)
    bare_cpu = statistics.median(results["bare parse"].cpu)
    out = [f"{'':<22}{'wall s':>9}{'cpu s':>9}{'lines/s':>10}{'peak MB':>9}{'wall/bare':>11}{'cpu/bare':>10}"]
    for name, timing in results.items():
        wall, cpu = statistics.median(timing.wall), statistics.median(timing.cpu)
        out.append(f"{name:<22}{wall:>9.2f}{cpu:>9.2f}{lines / wall:>10.0f}{max(timing.peak_mb):>9.0f}"
                   f"{wall / bare_wall:>11.2f}{cpu / bare_cpu:>10.2f}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="a folder, or a list of files (.txt, .tsv)")
    parser.add_argument("--root", type=Path, help="the folder a list's paths are relative to")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (median reported)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="memlint's -j for the parallel run")
    parser.add_argument("--tools", type=Path, help="bin folder of an environment with ruff, torchfix, flake8, fixit")
    parser.add_argument("--no-scaling", action="store_true", help="skip the scaling table")
    args = parser.parse_args()

    files = corpus_files(args.corpus, args.root)
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise SystemExit(f"{missing[0]}: no such file ({len(missing)} missing; is --root right?)")
    # memlint as pip installs it, its bytecode compiled: under PYTHONDONTWRITEBYTECODE every run
    # would otherwise compile its sources again (a fifth of a second), as LibCST's never are
    compileall.compile_dir(str(REPO / "memlint"), quiet=1)
    load_before = os.getloadavg()[0]
    counts = {f: line_count(f) for f in files}
    lines = sum(counts.values())
    scratch = Path(tempfile.mkdtemp(prefix="memlint-bench-"))
    try:
        (scratch / "pyproject.toml").write_text("[tool.memlint]\n")  # no user config leaks in
        files_list = scratch / "files.txt"
        files_list.write_text("\n".join(str(f.resolve()) for f in files) + "\n", encoding="utf-8")
        runs = contenders(files_list, scratch, args.jobs, args.tools)
        measure(runs["memlint warm"], REPO)  # fill the cache (not timed)
        results = {name: Timing() for name in runs}
        for _ in range(args.repeat):
            for name, command in runs.items():
                wall, cpu, peak = measure(command, REPO)
                results[name].wall.append(wall)
                results[name].cpu.append(cpu)
                results[name].peak_mb.append(peak)
        print(f"corpus: {args.corpus}  files: {len(files)}  lines: {lines}  rounds: {args.repeat} (medians)  "
              f"load average before/after: {load_before:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        print("\n".join(table(results, lines)))
        if not args.no_scaling:
            print()
            print("\n".join(scaling(files, counts, scratch, args.repeat)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def scaling(files: List[Path], counts: Dict[Path, int], scratch: Path, repeat: int) -> List[str]:
    """memlint cold -j1 over growing prefixes of the corpus."""
    out = [f"scaling, memlint cold -j1 --select ALL{'':<4}{'files':>7}{'lines':>9}{'wall s':>9}{'cpu s':>9}"
           f"{'lines/s (cpu)':>15}{'peak MB':>9}"]
    total = sum(counts.values())
    for target in (1_000, 10_000, 100_000, total):
        chosen, lines = [], 0
        for path in files:
            if lines >= target:
                break
            chosen.append(path)
            lines += counts[path]
        if target != total and lines >= total:
            continue  # the corpus is smaller than this step
        listing = scratch / f"first-{target}.txt"
        listing.write_text("\n".join(str(f.resolve()) for f in chosen) + "\n", encoding="utf-8")
        command = contenders(listing, scratch, 1, None)["memlint cold -j1"]
        timings = [measure(command, REPO) for _ in range(repeat)]
        wall = statistics.median(t[0] for t in timings)
        cpu = statistics.median(t[1] for t in timings)
        label = "all" if target == total else f"first {target:,}"
        out.append(f"  {label:<38}{len(chosen):>7}{lines:>9}{wall:>9.2f}{cpu:>9.2f}{lines / cpu:>15.0f}"
                   f"{max(t[2] for t in timings):>9.0f}")
    return out


if __name__ == "__main__":
    sys.exit(main())
