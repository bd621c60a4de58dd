"""What the flake8 plugin adds to a flake8 run, against what `memlint` alone takes.

    python bench/flake8_speed.py PATH... [--repeat N]

Three commands, each a fresh process on one core (`--jobs 1`), medians of N rounds of their CPU
time (the three take turns in each round): flake8 with the memlint plugin turned off (flake8
skips a plugin marked `off_by_default`), flake8 with it, and `memlint --exit-zero --no-cache
--jobs 1` over the same paths. The plugin's cost is the difference between the first two; the
goal is that it stays within memlint's own time.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys

FLAKE8 = "from flake8.main.cli import main; sys.exit(main())"
WITHOUT_PLUGIN = "import memlint.flake8_plugin as plugin; plugin.MemlintChecker.off_by_default = True; " + FLAKE8


def _cpu_seconds(command) -> float:
    """The CPU time (user + system) of one run of the command: on a shared machine it varies far
    less than the wall-clock time, and with one job the two are the same work."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def _medians(commands, repeat: int):
    """Each command's median over `repeat` rounds, the commands taking turns within a round, so
    that a change in the machine's load falls on all of them alike."""
    timings = [[] for _ in commands]
    for _ in range(repeat):
        for timing, command in zip(timings, commands):
            timing.append(_cpu_seconds(command))
    return [statistics.median(timing) for timing in timings]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    flake8_args = ["--jobs", "1", "--exit-zero", *args.paths]
    without, with_plugin, memlint = _medians([
        [sys.executable, "-c", "import sys; " + WITHOUT_PLUGIN, *flake8_args],
        [sys.executable, "-c", "import sys; " + FLAKE8, *flake8_args],
        # no cache (a warm run would parse nothing) and one process, as flake8 runs here
        [sys.executable, "-m", "memlint", "--exit-zero", "--no-cache", "--jobs", "1", *args.paths],
    ], args.repeat)
    print(f"paths: {len(args.paths)}  runs: {args.repeat} (median CPU seconds, one process each, one core)")
    print(f"{'flake8 without memlint':<28}{without:>8.2f} s")
    print(f"{'flake8 with memlint':<28}{with_plugin:>8.2f} s")
    print(f"{'  the plugin adds':<28}{with_plugin - without:>8.2f} s")
    print(f"{'memlint alone':<28}{memlint:>8.2f} s")
    print(f"plugin cost / memlint alone: {(with_plugin - without) / memlint:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
