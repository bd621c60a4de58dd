"""The CUDA allocator's memory history, read: memory over time, and what is alive at the peak.

Pure functions over the trace that `torch.cuda.memory._snapshot()["device_traces"][device]`
returns when `torch.cuda.memory._record_memory_history(enabled="all", context="alloc",
stacks="python")` was on: a list of entries {"action", "addr", "size", "time_us", "frames"},
oldest first, each frame {"filename", "line", "name"}, innermost first. Standard library only:
the child (memlint/verify/child.py) loads this file by path, without importing memlint.
"""

from __future__ import annotations

from typing import Callable, Dict, Hashable, List, Optional, Sequence, Tuple

TIMELINE_POINTS = 4000  # at most this many (seconds, bytes) points in a timeline
TOP_LINES = 5  # source lines named at the peak
OTHER = "other"  # allocations with Python frames, none of them in the script
NO_PYTHON = "no Python frame"  # allocations with no Python frame at all: on a GPU, mostly the
# backward passes, which the autograd engine runs on its own thread


def _step(entry: dict) -> int:
    """What an entry does to the allocated bytes: +size, -size, or 0."""
    action = entry.get("action")
    if action == "alloc":
        return entry.get("size", 0)
    if action == "free_completed":
        return -entry.get("size", 0)
    return 0


def timeline(trace: Sequence[dict], allocated_now: int, baseline_time: float) -> List[List[float]]:
    """Allocated bytes over time, anchored so that the last point equals `allocated_now`.

    The history may have lost its oldest entries (it is a ring buffer): what they allocated is
    the offset between the replayed level and the allocator's current count. Times are seconds
    since `baseline_time` when the trace has epoch microseconds, else since its first entry.
    """
    points, level, origin = [], 0, None
    for index, entry in enumerate(trace):
        change = _step(entry)
        if not change:
            continue
        level += change
        stamp = entry.get("time_us")
        if stamp is None:
            points.append([float(index), level])
            continue
        if origin is None:
            origin = baseline_time if abs(stamp / 1e6 - baseline_time) < 1e5 else stamp / 1e6
        points.append([stamp / 1e6 - origin, level])
    offset = allocated_now - level
    return [[t, b + offset] for t, b in thin(points)]


def thin(points: List[List[float]]) -> List[List[float]]:
    """At most TIMELINE_POINTS points, keeping the highest of each stretch."""
    if len(points) <= TIMELINE_POINTS:
        return points
    step = len(points) / TIMELINE_POINTS
    out = []
    for i in range(TIMELINE_POINTS):
        chunk = points[int(i * step):int((i + 1) * step)] or points[-1:]
        out.append(max(chunk, key=lambda p: p[1]))
    return out


def _site(entry: dict, script: str) -> Tuple[str, int, str]:
    """(file, line, function) of the innermost frame in `script`; OTHER when there is none,
    NO_PYTHON when the stack has no Python frame."""
    frames = entry.get("frames") or ()
    for frame in frames:
        if frame.get("filename") == script:
            return script, int(frame.get("line", 0)), str(frame.get("name", ""))
    return (OTHER if frames else NO_PYTHON), 0, ""


def peak(trace: Sequence[dict], script: str, allocated_now: int, top: int = TOP_LINES) -> Optional[dict]:
    """The lines of `script` holding the most memory at the allocated peak of the trace.

    Returns {"bytes": the peak, "lines": [{"file", "line", "function", "bytes"}, ...] (the `top`
    largest, largest first; "file" is OTHER for memory allocated outside the script's frames,
    NO_PYTHON where no Python frame was on the stack),
    "unattributed": bytes alive at the peak that the history does not show being allocated
    (it began or wrapped after they were)}. None when the trace allocates nothing.
    """
    found = alive_at_peak(trace, allocated_now, lambda entry: _site(entry, script))
    if found is None:
        return None
    ranked = ranked_sites(found["held"])
    return {
        "bytes": found["bytes"],
        "lines": [{"file": f, "line": line, "function": name, "bytes": b} for b, (f, line, name) in ranked[:top]],
        "unattributed": found["unattributed"],
    }


def ranked_sites(held: Dict[Hashable, int]) -> List[Tuple[int, Hashable]]:
    """(bytes, site) of the sites holding memory, largest first."""
    return sorted(((b, site) for site, b in held.items() if b > 0), key=lambda item: (-item[0], item[1]))


def alive_at_peak(trace: Sequence[dict], allocated_now: int, site: Callable[[dict], Hashable]) -> Optional[dict]:
    """What the allocations alive at the trace's allocated peak add up to, by `site(entry)` of
    the entry that allocated each: {"bytes": the peak, "index": the peak's entry, "held":
    {site: bytes}, "alive": {address: (bytes, site)}, "unattributed": bytes alive then that the
    trace does not show being allocated, "before": bytes allocated before the trace began}.
    None when the trace allocates nothing. Two passes, linear in the trace: find the peak,
    then replay up to it. The trace may have lost its oldest entries (a ring buffer): what
    they allocated is the difference between the replayed level and `allocated_now`.
    """
    level, best, best_index = 0, None, -1
    for index, entry in enumerate(trace):
        change = _step(entry)
        if not change:
            continue
        level += change
        if change > 0 and (best is None or level > best):
            best, best_index = level, index
    if best is None:
        return None
    offset = allocated_now - level  # alive throughout, allocated before the history began
    live: Dict[int, Tuple[int, Hashable]] = {}
    held: Dict[Hashable, int] = {}
    for entry in trace[:best_index + 1]:
        action = entry.get("action")
        if action == "alloc":
            where = site(entry)
            live[entry.get("addr", id(entry))] = (entry.get("size", 0), where)
            held[where] = held.get(where, 0) + entry.get("size", 0)
        elif action == "free_completed":
            size, where = live.pop(entry.get("addr"), (0, None))
            if where is not None:
                held[where] -= size
    known = sum(held.values())
    return {"bytes": best + offset, "index": best_index, "held": held, "alive": live,
            "unattributed": max(0, best + offset - known), "before": max(0, offset)}
