"""Where the peak is: the script lines holding the most memory at the peak, before and after a
fix, and whether a finding points at one of them.

Pure functions over what the child read from the CUDA allocator's history
(memlint.verify.history.peak, in Measurement.peak_at). A fix inserts or removes lines, so a line
of the original is followed into the fixed program through a diff of the two sources.
"""

from __future__ import annotations

import difflib
import os
from typing import Dict, List, Optional, Sequence

from memlint.verify.history import NO_PYTHON, OTHER

SHOWN = 3  # lines named in the text report


def line_map(before: str, after: str) -> Dict[int, int]:
    """Line numbers of `before` (1-based) -> the same line in `after`, for lines the fix kept
    or replaced one for one."""
    mapping: Dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            for offset in range(i2 - i1):
                mapping[i1 + offset + 1] = j1 + offset + 1
    return mapping


def mib(value: float) -> str:
    """Bytes as the report prints them: GiB, MiB, KiB below a tenth of a MiB, bytes below a
    tenth of a KiB (a scalar's 4 bytes are not "0.0 KiB")."""
    if value >= 2**30:
        return f"{value / 2**30:.2f} GiB"
    if value >= 0.1 * 2**20 or value == 0:
        return f"{value / 2**20:.1f} MiB"
    if value >= 0.1 * 2**10:
        return f"{value / 2**10:.1f} KiB"
    return f"{value:.0f} B"


def in_script(line: dict) -> bool:
    return line["file"] not in (OTHER, NO_PYTHON)


def _name(line: dict) -> str:
    if line["file"] == OTHER:
        return "outside the script"
    if line["file"] == NO_PYTHON:
        return "with no Python frame"
    return f"{os.path.basename(line['file'])}:{line['line']}"


def _codes(codes: Sequence[str]) -> str:
    listed = " and ".join(codes) if len(codes) < 3 else ", ".join(codes[:-1]) + " and " + codes[-1]
    return f"{listed} point{'s' if len(codes) == 1 else ''}"


def _held(peak: dict, file: str, line: int) -> int:
    return sum(x["bytes"] for x in peak.get("lines", ()) if x["file"] == file and x["line"] == line)


def attribute(before_peak: Optional[dict], after_peak: Optional[dict], findings: Dict[int, List[str]],
              before_source: str, after_source: str, after_path: str) -> Optional[dict]:
    """{"before": {...}, "after": {...}, "summary": one line}, or None without a before peak.

    `findings`: line of the original -> the codes of the findings there. Each side is the peak
    as measured, its lines marked with the codes pointing at them ("codes") and, after the fix,
    with the original's line they come from ("original_line"). The summary names the line
    holding the most at the original's peak, says when a finding points there (or else where
    the findings' lines stand), and what that line holds at the fixed program's peak.
    """
    if not before_peak or not before_peak.get("lines"):
        return None
    forward = line_map(before_source, after_source)
    back = {new: old for old, new in forward.items()}
    before = {**before_peak, "lines": [{**x, "codes": findings.get(x["line"], []) if in_script(x) else []}
                                       for x in before_peak["lines"]]}
    top = before["lines"][0]
    if top["file"] == NO_PYTHON:
        words = [f"peak {mib(before['bytes'])}, the most of it ({mib(top['bytes'])}) allocated with no Python frame "
                 "on the stack (as by a backward, which runs on the autograd engine's thread)"]
    elif top["file"] == OTHER:
        words = [f"peak {mib(before['bytes'])}, the most of it ({mib(top['bytes'])}) allocated outside the script"]
    else:
        words = [f"peak {mib(before['bytes'])} at {_name(top)} ({mib(top['bytes'])} allocated there)"]
    if top["codes"]:
        words[0] += f", where {_codes(top['codes'])}"
    else:
        pointed = [x for x in before["lines"] if x["codes"]]
        if pointed:
            words.append(", ".join(f"{_name(x)} ({', '.join(x['codes'])}) holds {mib(x['bytes'])}" for x in pointed))
        elif findings:
            where = ", ".join(f"line {line}" for line in sorted(findings))
            words.append(f"the findings' lines ({where}) hold nothing at the peak")
    after = None
    if after_peak:
        after = {**after_peak, "lines": [{**x, "original_line": back.get(x["line"]) if in_script(x) else None}
                                         for x in after_peak.get("lines", ())]}
        sentence = f"after the fix {mib(after['bytes'])}"
        if in_script(top) and top["line"] in forward:
            moved = forward[top["line"]]
            held = _held(after_peak, os.path.abspath(after_path), moved)
            where = f"{os.path.basename(after_path)}:{moved}"
            sentence += f", {mib(held)} of it at {where}"
            sentence += f" (line {top['line']} before)" if moved != top["line"] else ""
        words.append(sentence)
    return {"before": before, "after": after, "summary": "; ".join(words)}


def largest(peak: Optional[dict], shown: int = SHOWN) -> str:
    """`before.py:22 256.0 MiB, before.py:17 8.0 MiB`: the largest lines at a peak."""
    if not peak or not peak.get("lines"):
        return ""
    return ", ".join(f"{_name(x)} {mib(x['bytes'])}" for x in peak["lines"][:shown])
