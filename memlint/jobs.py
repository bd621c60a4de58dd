"""Work spread over processes: one call per item, results in the items' order, and a budget of
CPU time per item.

Linting is CPU-bound Python, so threads would not help; worker processes do. The parent hands
each worker one item at a time, largest first (the workers then end at about the same time),
and puts results back in the order of the items whatever order they finish in, so a run's
output does not depend on the number of jobs.

The budget is the kernel's: before each item a worker lowers its own CPU-time limit
(RLIMIT_CPU) to what it has used plus the budget, so an item that runs past it ends the worker
with SIGXCPU even inside native code (LibCST's parser holds the interpreter for as long as it
runs; no signal handler or thread could stop it). The parent sees which item that worker held,
reports it through `failed`, and starts another worker for the rest. With a budget, even a
single item runs in a worker, so that it can be stopped.

Where processes cannot be started (no fork, no semaphores, a process limit), the items run
here one after another, without a budget, and `notices` says so.

A worker never outlives the run: it is killed with its parent (Linux's parent-death signal;
elsewhere it sees the parent's end of its pipe close), so that killing only the parent, even
with SIGKILL, leaves no worker behind.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import sys
from collections import deque
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, TypeVar

from memlint.interrupts import default_in_child

try:
    import resource
except ImportError:  # pragma: no cover - Windows: no CPU-time limits
    resource = None  # type: ignore[assignment]

Item = TypeVar("Item")
Result = TypeVar("Result")
Failed = Callable[[Any, bool, str], Any]  # (item, over budget?, why) -> the item's result
Done = Callable[[int, Any], None]  # (item's index, its result): called here as each result comes
PR_SET_PDEATHSIG = 1


def cpu_count() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def budgets_enforced() -> bool:
    return resource is not None and hasattr(resource, "RLIMIT_CPU")


def _context():
    # fork starts a worker in milliseconds with memlint already imported; the run holds no
    # threads or locks a child could inherit mid-use. Elsewhere the platform's default.
    if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _limit_cpu(budget: float) -> None:
    """End this process (SIGXCPU) once it has used `budget` more seconds of CPU time."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + budget)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _die_with(parent: int) -> None:
    """Be killed when the parent dies (Linux); the parent may have died already."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(1)


def _serve(connection: Connection, others: List[Connection], function: Callable, budget: float,
           parent: int) -> None:
    """A worker: run the items the parent sends until it sends None."""
    _die_with(parent)
    for other in others:  # the parent's ends of the other workers' pipes: theirs to see close
        other.close()
    default_in_child()  # Ctrl-C and the run's own stopping signals are the parent's to handle
    if budget and budgets_enforced():
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # ended by SIGXCPU: no core file
        except (ValueError, OSError):
            pass
    while True:
        try:
            message = connection.recv()
        except EOFError:
            return
        if message is None:
            return
        index, item = message
        if budget and budgets_enforced():
            _limit_cpu(budget)
        try:
            connection.send((index, True, function(item)))
        except Exception as error:  # `function` should not raise; if it does, one line, not a dead worker
            connection.send((index, False, f"{type(error).__name__}: {error}"))


class _Worker:
    def __init__(self, context, function: Callable, budget: float, others: Sequence["_Worker"] = ()) -> None:
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_serve, daemon=True, args=(
            child, [other.connection for other in others], function, budget, os.getpid()))
        self.process.start()
        child.close()
        self.index: Optional[int] = None  # the item it is running

    def give(self, index: int, item: object) -> None:
        self.index = index
        self.connection.send((index, item))

    def stop(self) -> None:
        try:
            self.connection.send(None)
        except OSError:
            pass
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()


def _why(exitcode: Optional[int]) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"the process linting it was killed ({signal.Signals(-exitcode).name})"
        except ValueError:
            pass
    return f"the process linting it ended unexpectedly (exit {exitcode})"


def _run_pool(function: Callable, items: Sequence, workers: int, size: Callable, budget: float,
              failed: Failed, results: Dict[int, object], done: Done) -> None:
    context = _context()
    queue: Deque[int] = deque(sorted(range(len(items)), key=lambda i: -size(items[i])))
    pool: List[_Worker] = []

    def next_item(worker: _Worker) -> None:
        if queue:
            index = queue.popleft()
            worker.give(index, items[index])

    try:
        for _ in range(workers):
            pool.append(_Worker(context, function, budget, pool))
            next_item(pool[-1])
        while any(w.index is not None for w in pool):
            busy = [w for w in pool if w.index is not None]
            ready = wait([w.connection for w in busy] + [w.process.sentinel for w in busy])
            for worker in busy:
                if worker.connection not in ready and worker.process.sentinel not in ready:
                    continue
                index = worker.index
                assert index is not None
                worker.index = None
                try:
                    _, ok, value = worker.connection.recv()
                except (EOFError, OSError):  # the worker died holding this item
                    worker.process.join()
                    code = worker.process.exitcode
                    over = budgets_enforced() and code == -getattr(signal, "SIGXCPU", 0)
                    pool.remove(worker)
                    worker.connection.close()
                    if queue:
                        pool.append(_Worker(context, function, budget, pool))
                        next_item(pool[-1])
                    results[index] = failed(items[index], over, _why(code))
                    done(index, results[index])
                    continue
                next_item(worker)
                results[index] = value if ok else failed(items[index], False, f"internal error ({value})")
                done(index, results[index])
    finally:
        for worker in pool:
            if worker.index is not None:  # interrupted: do not wait for it
                worker.process.kill()
            worker.stop()


def map_in_order(function: Callable[[Item], Result], items: Sequence[Item], jobs: int,
                 size: Callable[[Item], int], failed: Failed, budget: float = 0.0,
                 notices: Optional[List[str]] = None, done: Optional[Done] = None) -> List[Result]:
    """[function(item) for item in items], over up to `jobs` worker processes, each item given
    `budget` seconds of CPU time (0: no limit); an item that runs out, or whose worker dies,
    gets `failed(item, over_budget, why)`. `function` must be a module-level function that does
    not raise. `done(index, result)` is called in this process as each result comes in."""
    done = done or (lambda index, result: None)
    results: Dict[int, object] = {}
    workers = min(jobs, len(items))
    if workers > 1 or (workers == 1 and budget and budgets_enforced()):
        try:
            _run_pool(function, items, workers, size, budget, failed, results, done)
        except (OSError, ImportError, NotImplementedError, ValueError) as error:
            if notices is not None:
                notices.append(f"cannot start worker processes ({type(error).__name__}: {error}); "
                               f"the files left were linted in this one, with no time budget")
    for index, item in enumerate(items):
        if index not in results:
            results[index] = function(item)
            done(index, results[index])
    return [results[index] for index in range(len(items))]  # type: ignore[misc]
