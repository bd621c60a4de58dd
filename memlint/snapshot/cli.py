"""`memlint snapshot SNAPSHOT.pickle [PATHS]`: arguments, the findings at the lines that hold the
peak, text or JSON. Exit codes: 0 read (whatever it found), 2 usage or input error."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from memlint.findings import Finding
from memlint.snapshot.load import SnapshotError, load
from memlint.snapshot.peak import DevicePeak, Held, device_peaks
from memlint.snapshot.sources import Sources
from memlint.verify.attribution import mib
from memlint.verify.cli import _codes, _Parser, _Usage  # usage errors in one line, as `memlint verify` has them

EXIT_OK, EXIT_ERROR = 0, 2
SHOWN = 10  # lines listed per device in the text output
NO_HISTORY = ("the snapshot holds no allocation history: record it with "
              "torch.cuda.memory._record_memory_history() before the work, then "
              "torch.cuda.memory._dump_snapshot(path)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="memlint snapshot",
        description="Read a CUDA memory snapshot (torch.cuda.memory._dump_snapshot) without a GPU, find the "
                    "peak, and name the lines of your files that allocated what was alive then, each with "
                    "memlint's findings at or around it.",
        epilog="Exit codes: 0 read, 2 usage error or a file that is not a snapshot.")
    parser.add_argument("snapshot", type=Path, help="the snapshot (a pickle, or a gzip of one)")
    parser.add_argument("paths", nargs="*", default=["."], help="your source files or folders (default: .)")
    parser.add_argument("--select", type=_codes, action="extend", default=None, metavar="CODES",
                        help="rules whose findings to name (default: every rule, the opt-in ones too, unless "
                             "the configuration selects)")
    parser.add_argument("--output-format", choices=("text", "json"), default="text")
    return parser


class _Findings:
    """memlint's findings in the files that hold memory at a peak, linted once each."""

    def __init__(self, files: Sequence[Path], config, rules, select: Optional[List[str]]) -> None:
        from memlint.run import Options, run

        if select is not None:
            config.selection.select = select
        elif config.selection.select is None:
            config.selection.select = ["ALL"]  # what a run decides: the opt-in rules too
        outcomes = run([str(path) for path in files], config, rules, Options()) if files else []
        self.by_file: Dict[Path, List[Finding]] = {path: outcome.findings for path, outcome in zip(files, outcomes)}
        self.sources: Dict[Path, str] = {}

    def near(self, held: Held) -> List[dict]:
        """Findings at the line, then those elsewhere in the innermost loop around it."""
        from memlint.verify.loops import enclosing

        findings = self.by_file.get(held.file, [])
        at = [{"code": f.code, "line": f.line, "message": f.message, "where": "at"}
              for f in findings if f.line == held.line]
        if held.file not in self.sources:
            try:
                self.sources[held.file] = held.file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                self.sources[held.file] = ""
        loops = enclosing(self.sources[held.file], [held.line])
        if loops:
            loop = loops[0]
            at += [{"code": f.code, "line": f.line, "message": f.message, "where": "loop",
                    "loop": [loop.line, loop.end]}
                   for f in findings if f.line != held.line and loop.line <= f.line <= loop.end]
        return at


def _where(held: Held) -> str:
    from memlint.run import display_path

    return f"{display_path(held.file)}:{held.line}"


def _named(near: List[dict]) -> str:
    """`, where MEM201 points` and/or `; MEM204 at line 30, in its loop`."""
    at = sorted({f["code"] for f in near if f["where"] == "at"})
    loop = [f for f in near if f["where"] == "loop"]
    words = f", where {' and '.join(at)} point{'s' if len(at) == 1 else ''}" if at else ""
    if loop:
        first, last = loop[0]["loop"]
        listed = ", ".join(f"{f['code']} at line {f['line']}" for f in loop)
        words += f"{';' if at else ','} {listed} in its loop (lines {first}-{last})"
    return words


def summary(peak: DevicePeak, near: Dict[int, List[dict]]) -> str:
    """`peak 38.2 GiB; 9.4 GiB allocated at train.py:63, where MEM201 points`."""
    words = f"peak {mib(peak.bytes)}"
    if peak.lines:
        top = peak.lines[0]
        words += f"; {mib(top.bytes)} allocated at {_where(top)}{_named(near[0])}"
    elif peak.no_python:
        words += "; none of it allocated in your files"
    return words


def _text(path: Path, peaks: List[DevicePeak], near: List[Dict[int, List[dict]]]) -> str:
    lines = []
    for peak, found in zip(peaks, near):
        when = f" ({peak.seconds:.1f} s into the history)" if peak.seconds is not None else ""
        lines.append(f"memlint snapshot {path}: device {peak.device}, {peak.events:,} allocator events; "
                     f"{mib(peak.allocated_at_dump)} allocated when it was taken")
        lines.append(summary(peak, found) + when)
        lines.append("alive at the peak, by the line of your files that allocated it:")
        width = 10
        for index, held in enumerate(peak.lines[:SHOWN]):
            lines.append(f"  {mib(held.bytes):>{width}}  {_where(held)} in {held.function}{_named(found[index])}")
        if len(peak.lines) > SHOWN:
            rest = sum(h.bytes for h in peak.lines[SHOWN:])
            lines.append(f"  {mib(rest):>{width}}  at {len(peak.lines) - SHOWN} more lines of your files")
        for size, what in ((peak.no_python, "with no Python frame on the stack (as by a backward, which runs on "
                                            "the autograd engine's thread)"),
                           (peak.outside, "by code outside your files (no frame of the stack in them)"),
                           (peak.unattributed, "before the history began (not attributed)")):
            if size:
                lines.append(f"  {mib(size):>{width}}  {what}")
        if peak.out_of_memory is not None:
            asked, where = peak.out_of_memory
            at = f" at {_where(where)}" if where is not None else ""
            lines.append(f"the history ends with an out-of-memory: {mib(asked)} asked for{at}")
        lines.append("")
    return "\n".join(lines)


def _json(path: Path, peaks: List[DevicePeak], near: List[Dict[int, List[dict]]]) -> str:
    return json.dumps({"version": 1, "snapshot": str(path), "devices": [{
        "device": peak.device, "peak_bytes": peak.bytes, "peak_seconds": peak.seconds, "events": peak.events,
        "allocated_at_dump": peak.allocated_at_dump,
        "lines": [{"file": str(held.file), "line": held.line, "function": held.function, "bytes": held.bytes,
                   "findings": found[index]} for index, held in enumerate(peak.lines)],
        "no_python_bytes": peak.no_python, "outside_bytes": peak.outside, "unattributed_bytes": peak.unattributed,
        "out_of_memory": None if peak.out_of_memory is None else {
            "bytes": peak.out_of_memory[0],
            "file": str(peak.out_of_memory[1].file) if peak.out_of_memory[1] else None,
            "line": peak.out_of_memory[1].line if peak.out_of_memory[1] else None},
        "summary": summary(peak, found),
    } for peak, found in zip(peaks, near)]}, indent=2)


def _run(argv: Sequence[str]) -> int:
    from memlint.config import ConfigError
    from memlint.config import load as load_config
    from memlint.files import BadPath, discover
    from memlint.rules import registry

    args = _parser().parse_args(argv)
    try:
        snapshot = load(args.snapshot)
    except SnapshotError as error:
        raise _Usage(f"{args.snapshot}: {error}") from None
    rules = registry()
    try:
        config = load_config(Path.cwd(), rules)
    except ConfigError as error:
        raise _Usage(str(error)) from None
    files = list(discover(args.paths, config))
    bad = next((item for item in files if isinstance(item, BadPath) and not item.warning), None)
    if bad is not None:
        raise _Usage(f"{bad.path}: {bad.message}")
    sources = Sources(item for item in files if not isinstance(item, BadPath))
    peaks = device_peaks(snapshot, sources)
    if not peaks:
        if args.output_format == "json":
            print(json.dumps({"version": 1, "snapshot": str(args.snapshot), "devices": [], "message": NO_HISTORY}))
        else:
            print(f"memlint snapshot {args.snapshot}: {NO_HISTORY}")
        return EXIT_OK
    held_files = sorted({held.file for peak in peaks for held in peak.lines})
    try:
        findings = _Findings(held_files, config, rules, args.select)
    except ConfigError as error:
        raise _Usage(str(error)) from None
    near = [{index: findings.near(held) for index, held in enumerate(peak.lines)} for peak in peaks]
    print(_json(args.snapshot, peaks, near) if args.output_format == "json" else _text(args.snapshot, peaks, near),
          end="" if args.output_format == "text" else "\n")
    return EXIT_OK


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`memlint snapshot ...` (argv without the word `snapshot`). Never raises; returns the exit code."""
    try:
        return _run(sys.argv[1:] if argv is None else argv)
    except _Usage as error:
        print(f"memlint snapshot: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as done:  # --help
        return done.code if isinstance(done.code, int) else EXIT_ERROR
    except KeyboardInterrupt:
        print("memlint snapshot: error: interrupted", file=sys.stderr)
        return EXIT_ERROR
