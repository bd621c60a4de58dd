"""Fixes as an editor applies them: a fix's unified diff (what `--output-format json` gives,
made by the same run) applied to the text it was made from, and the change from one text to
another as one edit of whole lines. Lines split where Python splits them (\\n, \\r\\n, \\r),
as the Language Server Protocol counts them."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import List, Optional

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


class StaleDiff(Exception):
    """The diff was not made from this text."""


def lines_of(text: str) -> List[str]:
    return list(io.StringIO(text, newline=""))


def apply_diff(text: str, diff: str) -> str:
    """`text` with the unified diff `diff` applied; StaleDiff when its context does not match."""
    old = lines_of(text)
    new: List[str] = []
    position = 0  # the next line of `old` to copy
    last = ""
    for line in lines_of(diff)[2:]:  # after the ---/+++ header
        hunk = _HUNK.match(line)
        if hunk is not None:
            start = int(hunk.group(1)) - (0 if hunk.group(2) == "0" else 1)
            if start < position:
                raise StaleDiff("hunks out of order")
            new += old[position:start]
            position = start
        elif line.startswith("\\"):  # "\ No newline at end of file": the line above has none
            if last == "+":
                new[-1] = new[-1].rstrip("\r\n")
        elif line[:1] in (" ", "-"):
            if position >= len(old) or old[position].rstrip("\r\n") != line[1:].rstrip("\r\n"):
                raise StaleDiff("the diff's context is not in the text")
            if line[0] == " ":
                new.append(old[position])
            position += 1
        elif line.startswith("+"):
            new.append(line[1:])
        last = line[:1]
    return "".join(new + old[position:])


@dataclass(frozen=True)
class LineEdit:
    """Replace the lines [start, end) of the old text (0-based) with `text`; `end` may be the
    number of lines (through the end of the text)."""

    start: int
    end: int
    text: str


def line_edit(old: str, new: str) -> Optional[LineEdit]:
    """The one edit of whole lines that turns `old` into `new` (the lines they share at the start
    and at the end kept), or None when they are equal."""
    if old == new:
        return None
    before, after = lines_of(old), lines_of(new)
    start = 0
    while start < min(len(before), len(after)) and before[start] == after[start]:
        start += 1
    tail = 0
    while (tail < min(len(before), len(after)) - start
           and before[len(before) - 1 - tail] == after[len(after) - 1 - tail]):
        tail += 1
    return LineEdit(start, len(before) - tail, "".join(after[start:len(after) - tail]))
