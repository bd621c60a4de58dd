"""Which runs go at once: up to `jobs` children side by side on one device, when memory allows.

A run's peak memory and gradients are its own process's (the CUDA allocator's statistics, the
kernel's peak RSS), so runs of those claims do not disturb each other; time does, so a run that
is timed goes alone. A run starts when fewer than `jobs` are running and the memory of those
running, as their programs used it in earlier runs, plus its own, fits in the budget; a program
not run yet counts as the largest seen so far, and the very first run goes alone to have one.
A run that ran out of memory next to others is run again alone, and only that run counts.
Runs start in the order given (repeats interleaved), each in a thread that waits for its child.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Dict, Hashable, List, Optional, Sequence, Set

from memlint.verify.measure import Measurement


@dataclass(eq=False)
class Task:
    program: Hashable  # runs of one program share their memory estimate
    solo: bool  # timed: nothing else may run meanwhile


def footprints(extra: int) -> Callable[[Task, Dict[Hashable, int]], Optional[int]]:
    """A task's expected bytes: its program's largest seen plus `extra` (a CUDA context), or
    the largest of any program; None before anything has finished."""

    def estimate(task: Task, seen: Dict[Hashable, int]) -> Optional[int]:
        if task.program in seen:
            return seen[task.program] + extra
        return max(seen.values()) + extra if seen else None

    return estimate


def run_all(tasks: Sequence[Task], work: Callable[[Task], Measurement], jobs: int,
            budget: Optional[int], used: Callable[[Measurement], Optional[int]],
            estimate: Callable[[Task, Dict[Hashable, int]], Optional[int]],
            abort: Callable[[], None] = lambda: None) -> List[Measurement]:
    """`work(task)` for every task, as described above; the measurements in the tasks' order.

    `used(m)`: the memory a finished run held (None: unknown). `abort()` stops what is running
    when this thread is interrupted (Ctrl-C) or a run raised; the exception is then re-raised.
    """
    lock = threading.Condition()
    waiting = deque(range(len(tasks)))
    running: Dict[int, int] = {}  # task index -> bytes it was admitted with
    crowded: Set[int] = set()  # ran while another did
    alone: Set[int] = set()  # to run again alone
    seen: Dict[Hashable, int] = {}
    results: List[Optional[Measurement]] = [None] * len(tasks)
    failures: List[BaseException] = []

    def admitted(index: int) -> Optional[int]:
        """Bytes to hold for it if it may start now; None if it must wait."""
        task = tasks[index]
        need = estimate(task, seen)
        if not running:
            return need or 0
        if task.solo or index in alone or len(running) >= max(1, jobs) or need is None:
            return None
        if any(tasks[other].solo or other in alone for other in running):
            return None
        if budget is not None and sum(running.values()) + need > budget:
            return None
        return need

    def one(index: int) -> None:
        try:
            measurement = work(tasks[index])
        except BaseException as error:  # noqa: B902 - handed to the scheduling thread
            with lock:
                failures.append(error)
                running.pop(index, None)
                lock.notify_all()
            return
        with lock:
            running.pop(index, None)
            held = used(measurement)
            if held is not None:
                seen[tasks[index].program] = max(held, seen.get(tasks[index].program, 0))
            if measurement.status == "oom" and index in crowded and index not in alone:
                alone.add(index)
                waiting.appendleft(index)
            else:
                results[index] = measurement
            lock.notify_all()

    try:
        with lock:
            while (waiting or running) and not failures:
                if waiting:
                    need = admitted(waiting[0])
                    if need is not None:
                        index = waiting.popleft()
                        if running:
                            crowded.add(index)
                            crowded.update(running)
                        running[index] = need
                        threading.Thread(target=one, args=(index,), daemon=True).start()
                        continue
                lock.wait()
            if failures:
                raise failures[0]
    except BaseException:
        abort()
        raise
    return [m for m in results if m is not None]
