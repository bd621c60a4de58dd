"""Work spread over processes: one call per item, results in the items' order.

Linting is CPU-bound Python, so threads would not help; a process pool does. The largest items
are started first (the pool then ends at about the same time on every core), and results come
back in the order of the items whatever order they finish in, so a run's output does not
depend on the number of jobs. Where processes cannot be started (no semaphores, no fork, a
process limit) or a worker dies, what is left runs here, one item after the other.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Dict, List, Optional, Sequence, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def cpu_count() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _ignore_interrupts() -> None:
    """In a worker: Ctrl-C is the parent's to handle (one message, not a traceback per worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _context():
    # fork starts a worker in milliseconds with memlint already imported; the run holds no
    # threads or locks a child could inherit mid-use. Elsewhere the platform's default.
    if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return None


def map_in_order(function: Callable[[Item], Result], items: Sequence[Item], jobs: int,
                 size: Callable[[Item], int], notices: Optional[List[str]] = None) -> List[Result]:
    """[function(item) for item in items], over up to `jobs` processes. `function` must be a
    module-level function that does not raise; `size` ranks items by expected work. When the
    pool fails, a one-line reason goes to `notices` and the items it did not finish run here."""
    workers = min(jobs, len(items))
    if workers <= 1:
        return [function(item) for item in items]
    futures: Dict[int, Future] = {}
    failure: Optional[BaseException] = None
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=_context(),
                                 initializer=_ignore_interrupts) as pool:
            try:
                for index in sorted(range(len(items)), key=lambda i: -size(items[i])):
                    futures[index] = pool.submit(function, items[index])
                for future in futures.values():
                    failure = failure or future.exception()  # waits; a dead worker fails the rest
            except BaseException:  # Ctrl-C: drop what has not started, stop what has
                pool.shutdown(wait=False, cancel_futures=True)
                for process in list(getattr(pool, "_processes", {}).values()):
                    process.terminate()
                raise
    except (OSError, ImportError, NotImplementedError, RuntimeError, BrokenProcessPool) as error:
        failure = error
    if failure is not None and notices is not None:
        notices.append(f"cannot use {workers} processes ({type(failure).__name__}: {failure}); "
                       f"the files left were linted in this one")
    results = []
    for index, item in enumerate(items):
        future = futures.get(index)
        done = future is not None and future.done() and not future.cancelled() and future.exception() is None
        results.append(future.result() if done else function(item))  # type: ignore[union-attr]
    return results
