"""Time per iteration of chosen loops of the running script, taken inside the child.

The child (memlint/verify/child.py) loads this file by path: standard library only. The loops
are given as [line, tick, end] (loops.py chooses them): the interpreter reports the `tick` line
once per iteration, so the time between two ticks is one iteration. Before each reading the
device is synchronised, so an iteration's queued kernels count in it. A line of the same code
object outside the loop, or a new call of it, ends a stretch: the time from the loop's last
tick to its next entry is not an iteration. A loop's time per iteration is the median over its
iterations once the first fifth (its warm-up: first kernels, allocator growth) is left out: a
neighbour taking the CPU for a moment moves it little.

On Python 3.12+ `sys.monitoring` reports lines of the loops' own code objects only, and the
lines of a loop's body are switched off after their first report, so the script runs at full
speed but for one call per iteration. Elsewhere a line trace (`sys.settrace`) of those code
objects does the same, a little slower.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
import types
from typing import Callable, Dict, List, Optional, Sequence

WARMUP_SHARE = 0.2  # the first fifth of the iterations (at least one) is warm-up: left out
MIN_STEADY = 3  # fewer steady iterations than this: no time per iteration
FREE_TOOL_IDS = (4, 3)  # sys.monitoring ids no tool claims (0 debugger, 1 coverage, 2 profiler, 5 optimizer)


class _Stretch:
    """One loop's iterations: the seconds between consecutive ticks of one entry into it."""

    def __init__(self, line: int, tick: int, end: int) -> None:
        self.line, self.tick, self.end = line, tick, end
        self.last: Optional[float] = None
        self.intervals: List[float] = []

    def inside(self, line: int) -> bool:
        return self.line <= line <= self.end

    def result(self) -> dict:
        warmup = max(1, math.ceil(len(self.intervals) * WARMUP_SHARE))
        steady = self.intervals[warmup:]
        return {"line": self.line, "iterations": len(self.intervals), "warmup": min(warmup, len(self.intervals)),
                "per_iteration": statistics.median(steady) if len(steady) >= MIN_STEADY else None,
                "first": self.intervals[0] if self.intervals else None}


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


class LoopClock:
    """Times `loops` ([line, tick, end] of the script) in the code compiled from it; `sync` runs
    before each reading (the device's synchronize, or nothing)."""

    def __init__(self, code: types.CodeType, loops: Sequence[Sequence[int]], sync: Callable[[], None]) -> None:
        self.sync = sync
        self.stretches = [_Stretch(*loop) for loop in loops]
        self.by_code: Dict[types.CodeType, List[_Stretch]] = {}
        for each in _code_objects(code):
            lines = {line for _, _, line in each.co_lines() if line} if hasattr(each, "co_lines") \
                else {line for _, line in _linestarts(each)}
            mine = [s for s in self.stretches if s.tick in lines]
            if mine:
                self.by_code[each] = mine
        self.tool: Optional[int] = None

    def _tick(self, stretch: _Stretch) -> None:
        self.sync()
        now = time.perf_counter()
        if stretch.last is not None:
            stretch.intervals.append(now - stretch.last)
        stretch.last = now

    def _line(self, code: types.CodeType, line: int) -> bool:
        """Returns whether the line matters to a loop (else its reports may be switched off)."""
        matters = False
        for stretch in self.by_code.get(code, ()):
            if line == stretch.tick:
                self._tick(stretch)
                matters = True
            elif not stretch.inside(line):
                stretch.last = None  # left the loop: the next tick starts a new stretch
                matters = True
        return matters

    def _enter(self, code: types.CodeType) -> None:
        for stretch in self.by_code.get(code, ()):
            stretch.last = None

    def start(self) -> None:
        if not self.by_code:
            return
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None:
            tool = next((t for t in FREE_TOOL_IDS if monitoring.get_tool(t) is None), None)
            if tool is not None:
                self._monitor(monitoring, tool)
                return
        self._trace()

    def _monitor(self, monitoring, tool: int) -> None:
        monitoring.use_tool_id(tool, "memlint verify")
        self.tool = tool
        events = monitoring.events

        def on_line(code, line):
            return None if self._line(code, line) else monitoring.DISABLE

        def on_start(code, offset):
            self._enter(code)

        monitoring.register_callback(tool, events.LINE, on_line)
        monitoring.register_callback(tool, events.PY_START, on_start)
        for code in self.by_code:
            monitoring.set_local_events(tool, code, events.LINE | events.PY_START)

    def _trace(self) -> None:
        watched = self.by_code

        def local(frame, event, arg):
            if event == "line":
                self._line(frame.f_code, frame.f_lineno)
            return local

        def calls(frame, event, arg):
            if frame.f_code in watched:
                self._enter(frame.f_code)
                return local
            return None

        sys.settrace(calls)

    def stop(self) -> List[dict]:
        """Stop timing; each loop's iterations and steady-state seconds per iteration."""
        if self.tool is not None:
            monitoring = sys.monitoring
            for code in self.by_code:
                monitoring.set_local_events(self.tool, code, 0)
            monitoring.register_callback(self.tool, monitoring.events.LINE, None)
            monitoring.register_callback(self.tool, monitoring.events.PY_START, None)
            monitoring.free_tool_id(self.tool)
            self.tool = None
        elif self.by_code:
            sys.settrace(None)
        return [stretch.result() for stretch in self.stretches]


def _linestarts(code: types.CodeType):
    import dis

    return dis.findlinestarts(code)
