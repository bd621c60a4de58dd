"""Process trees: find every descendant of a run and kill them all, including any that left its
process group or session (`setsid`, a double fork).

A process group is not enough: a script's child that calls `setsid()` leaves it, and once its
parent dies it is re-parented out of reach. So the child that runs a script makes itself a
*subreaper* (Linux `PR_SET_CHILD_SUBREAPER`): orphans below it are re-parented to it instead
of to init, and stay its descendants while it lives. The parent side makes itself one too, so
that what a killed child leaves behind comes back to it. Descendants are found from /proc
(each process's parent), so this works wherever /proc does; elsewhere it does nothing and the
process-group kill is what remains. Standard library only: the child loads this file by path.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Dict, Iterable, List, Set

PR_SET_CHILD_SUBREAPER = 36
ROUNDS = 50  # kill, look again, until nothing is left (a process may fork while we look)


def become_subreaper() -> bool:
    """Orphans of this process's descendants are re-parented to it (Linux 3.4+)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _parents() -> Dict[int, int]:
    """pid -> parent pid of every live process (zombies left out: they are dead already)."""
    found: Dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # the command name may hold spaces and ")"
        if len(fields) > 1 and fields[0] not in (b"Z", b"X"):
            found[int(name)] = int(fields[1])
    return found


def descendants(pid: int) -> List[int]:
    """Every live process below `pid`, parents before their children."""
    children: Dict[int, List[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    out, queue = [], list(children.get(pid, ()))
    while queue:
        current = queue.pop(0)
        out.append(current)
        queue.extend(children.get(current, ()))
    return out


def _kill(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def reap(pids: Iterable[int]) -> None:
    """Collect the exit status of those that are our own children, so that no zombie stays."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass


def kill_descendants(pid: int) -> List[int]:
    """SIGKILL everything below `pid` (not `pid` itself), looking again until nothing is left.

    While `pid` lives and is a subreaper, the children of a killed process are re-parented to
    it, so the next look finds them. Returns the pids killed.
    """
    killed: List[int] = []
    for _ in range(ROUNDS):
        found = [p for p in descendants(pid) if p not in killed]
        if not found:
            break
        _kill(found)
        killed += found
        reap(found)
    return killed


def kill_orphans(exclude: Set[int]) -> List[int]:
    """In a subreaper: kill the processes re-parented to this one (every child but `exclude`,
    the children it started on purpose) and everything below them. Returns the pids killed."""
    me = os.getpid()
    killed: List[int] = []
    for _ in range(ROUNDS):
        orphans = [child for child, parent in _parents().items() if parent == me and child not in exclude]
        found = [p for orphan in orphans for p in (orphan, *descendants(orphan)) if p not in killed]
        if not found:
            break
        _kill(found)
        killed += found
        reap(found)
    return killed
