"""How memlint's time and memory grow with one file's size, on generated pathological files.

    python bench/growth.py [--sizes 2000,4000,8000,16000] [--shape NAME ...] [--json]

Each shape is a block repeated until the file has the given number of lines, the shapes of
tests/test_growth.py (which counts the calls a lint makes where this times it): functions that
allocate noise in a loop, training functions that clear the gradients between backward and step
(MEM302), evaluation functions keeping outputs (MEM201, MEM202, MEM203), fp16 steps, a model
class of many methods, a script of module-level training loops (one scope), and more. memlint runs as a
fresh process, --select ALL, one job, no cache, no time budget. Linear growth keeps lines/s
flat from row to row; the last column is the seconds per line relative to the first size.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from test_growth import SHAPES  # noqa: E402  (one definition of the shapes: the test counts calls, this times them)


def generate(shape: str, lines: int) -> str:
    header, block = SHAPES[shape]
    block = textwrap.dedent(block)
    per_block = block.count("\n")
    return header + "".join(block.replace("{i}", str(i)) for i in range(max(1, lines // per_block)))


def measure(path: Path, output: str) -> Tuple[float, float, float]:
    command = [sys.executable, "-m", "memlint", "--select", "ALL", "--exit-zero", "--no-cache", "-j", "1",
               "--file-timeout", "0", "--output-format", output, str(path)]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"memlint failed on {path}")
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,4000,8000,16000", help="file sizes in lines, comma-separated")
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES), help="shapes to run (default: all)")
    parser.add_argument("--json", action="store_true", help="JSON output (a diff per fix) instead of text")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; output {'json' if args.json else 'text'}")
    print(f"{'shape':<36}{'lines':>9}{'wall s':>9}{'cpu s':>9}{'lines/s (cpu)':>15}{'peak MB':>9}{'s/line vs first':>17}")
    with tempfile.TemporaryDirectory(prefix="memlint-growth-") as scratch:
        for shape in args.shape or sorted(SHAPES):
            first = None
            for size in sizes:
                path = Path(scratch) / f"{shape}_{size}.py"
                text = generate(shape, size)
                path.write_text(text)
                lines = text.count("\n")
                wall, cpu, peak = measure(path, "json" if args.json else "text")
                per_line = cpu / lines
                first = first or per_line
                print(f"{shape:<36}{lines:>9}{wall:>9.2f}{cpu:>9.2f}{lines / cpu:>15.0f}{peak:>9.0f}"
                      f"{per_line / first:>17.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
