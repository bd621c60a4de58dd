"""Per device: the allocated peak of a snapshot's history, and what was alive then, by the line
of the user's files that allocated it.

The history (`device_traces`) lists every allocation and free, oldest first, each with the
Python stack that made it, innermost frame first (memlint.verify.history replays it). An
allocation is placed at its innermost frame in the user's files (memlint.snapshot.sources):
the line that made the tensor, or the user's line that called into a library that made it.
What was allocated with no Python frame on the stack is, on a GPU, mostly a backward's (the
autograd engine runs it on its own thread). The history is a ring buffer: what was allocated
before it began and still lives when the snapshot was taken is found among the snapshot's
blocks, with their own stacks; the rest of what it lost is counted as unattributed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Hashable, List, Optional, Sequence, Tuple

from memlint.snapshot.sources import Sources
from memlint.verify.history import NO_PYTHON, OTHER, alive_at_peak, ranked_sites

ALIVE = ("active_allocated", "active_pending_free")  # block states that count as allocated


@dataclass
class Held:
    """Bytes alive at the peak that one line of the user's files allocated."""

    file: Path
    line: int
    function: str
    bytes: int


@dataclass
class DevicePeak:
    device: int
    bytes: int  # the allocated peak
    seconds: Optional[float]  # when, since the history's first event
    events: int  # entries in the history
    allocated_at_dump: int  # what was allocated when the snapshot was taken
    lines: List[Held] = field(default_factory=list)  # largest first
    no_python: int = 0
    outside: int = 0  # allocated from Python code outside the user's files
    unattributed: int = 0  # allocated before the history began, and freed before the snapshot
    out_of_memory: Optional[Tuple[int, Optional[Held]]] = None  # (bytes asked for, where) of the last failed allocation


def _is_python(frame: dict) -> bool:
    name = str(frame.get("filename", ""))
    return name.endswith(".py") or (name.startswith("<") and name.endswith(">"))


def _site(frames: Sequence[dict], sources: Sources) -> Hashable:
    """(file, line, function) of the innermost frame in the user's files; OTHER or NO_PYTHON."""
    python = [frame for frame in frames or () if _is_python(frame)]
    for frame in python:
        line, function = int(frame.get("line", 0)), str(frame.get("name", ""))
        found = sources.match(str(frame.get("filename", "")), line, function)
        if found is not None:
            return str(found), line, function
    return OTHER if python else NO_PYTHON


def _allocated(segments: Sequence[dict], device: int) -> Dict[int, dict]:
    """The blocks allocated when the snapshot was taken, by address."""
    return {block.get("address"): block for segment in segments if segment.get("device", 0) == device
            for block in segment.get("blocks") or () if block.get("state") in ALIVE}


def device_peaks(snapshot: dict, sources: Sources) -> List[DevicePeak]:
    """One DevicePeak per device whose history allocated anything, in device order."""
    traces = snapshot.get("device_traces") or []
    segments = snapshot.get("segments") or []
    found = []
    for device, trace in enumerate(traces):
        if not trace:
            continue
        blocks = _allocated(segments, device)
        now = sum(block.get("size", 0) for block in blocks.values())
        alive = alive_at_peak(trace, now, lambda entry: _site(entry.get("frames"), sources))
        if alive is None:
            continue
        held = dict(alive["held"])
        unattributed = alive["unattributed"]
        seen = {entry.get("addr") for entry in trace}
        for address, block in blocks.items():  # allocated before the history, alive throughout
            if address not in seen and unattributed > 0:
                size = min(block.get("size", 0), unattributed)
                where = _site(block.get("frames"), sources)
                held[where] = held.get(where, 0) + size
                unattributed -= size
        times = [entry["time_us"] for entry in (trace[0], trace[alive["index"]]) if "time_us" in entry]
        peak = DevicePeak(device, alive["bytes"], (times[1] - times[0]) / 1e6 if len(times) == 2 else None,
                          len(trace), now, unattributed=unattributed,
                          no_python=held.get(NO_PYTHON, 0), outside=held.get(OTHER, 0))
        peak.lines = [Held(Path(site[0]), site[1], site[2], size) for size, site in ranked_sites(
            {site: size for site, size in held.items() if site not in (NO_PYTHON, OTHER)})]
        failed = [entry for entry in trace if entry.get("action") == "oom"]
        if failed:
            where = _site(failed[-1].get("frames"), sources)
            peak.out_of_memory = (failed[-1].get("size", 0),
                                  Held(Path(where[0]), where[1], where[2], 0) if isinstance(where, tuple) else None)
        found.append(peak)
    return found
