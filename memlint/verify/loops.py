"""Which loop a time claim is judged by: the loop around the finding that is still there after
the fix, in both programs.

A fix for a per-step cost (MEM102, MEM103, MEM104, MEM105, MEM501) changes what one iteration
of the loop around it costs; the whole run's wall time adds the script's start-up (its first
kernels, its first backward), which varies by more than some fixes save. So the child times
each iteration of that loop (memlint/verify/child.py), and this module says which loop it is.
The loop must survive the fix: MEM105's fix replaces its per-element loop with one call, so the
loop timed is the one around it. Pure functions over sources; `ast` only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from memlint.verify.attribution import line_map


@dataclass(frozen=True)
class Loop:
    """A `for` or `while` of one program. `line` is where the statement starts; `tick` is the line
    the interpreter reports once per iteration (a `while` re-tests its condition, which may be
    on a later line than the keyword); `end` is the body's last line."""

    line: int
    tick: int
    end: int


@dataclass(frozen=True)
class TimedLoop:
    """The same loop in the original program and in the fixed one."""

    before: Loop
    after: Loop


def _loops(source: str) -> Dict[int, Loop]:
    """Every loop of `source` by the line it starts on (the outermost, where two start on one line)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    found: Dict[int, Loop] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            tick = node.test.lineno if isinstance(node, ast.While) else node.lineno
            found.setdefault(node.lineno, Loop(node.lineno, tick, node.end_lineno or node.lineno))
    return found


def enclosing(source: str, lines: Iterable[int]) -> List[Loop]:
    """The loops whose body holds every one of `lines`, innermost first."""
    wanted = list(lines)
    if not wanted:
        return []
    around = [loop for loop in _loops(source).values()
              if all(loop.line < line <= loop.end for line in wanted)]
    return sorted(around, key=lambda loop: -loop.line)


def timed_loop(before: str, after: str, lines: Iterable[int]) -> Optional[TimedLoop]:
    """The innermost loop of `before` around all of `lines` (the findings) that the fix kept, and
    where it is in `after`; None when there is none (the whole run is timed then)."""
    forward = line_map(before, after)
    after_loops = _loops(after)
    for loop in enclosing(before, lines):
        moved = forward.get(loop.line)
        if moved is not None and moved in after_loops:
            return TimedLoop(loop, after_loops[moved])
    return None


def as_spec(loops: Iterable[Loop]) -> List[Tuple[int, int, int]]:
    """The loops as the child's spec lists them: [line, tick, end]."""
    return sorted({(loop.line, loop.tick, loop.end) for loop in loops})
