"""Work spread over processes: one call per item, results in the items' order, and budgets of
CPU time per item and of memory per worker.

Linting is CPU-bound Python, so threads would not help; worker processes do. The parent hands
out the items largest first (the workers then end at about the same time), and puts results
back in the order of the items whatever order they finish in, so a run's output does not
depend on the number of jobs. A lone forked worker is handed its next item before it ends
the one it runs (AHEAD): it finds the next waiting in its pipe, where a worker given one item
at a time slept on the parent between items, and a process woken that way may wake on another
core, away from its caches. On a quiet 16-core machine, one job over the whole corpus took
52 s of CPU time handed items ahead, 60 s handed one at a time (medians of six rounds;
docs/speed.md, Speed42). Where there are several workers, each is handed one item at a time:
an item handed ahead to a worker stuck on a slow file would wait there while the others idle.

The budget is the kernel's: before each item a worker lowers its own CPU-time limit
(RLIMIT_CPU) to what it has used plus the budget, so an item that runs past it ends the worker
with SIGXCPU even inside native code (LibCST's parser holds the interpreter for as long as it
runs; no signal handler or thread could stop it). The parent sees which item that worker held,
reports it through `failed`, and starts another worker for the rest. With a budget, even a
single item runs in a worker, so that it can be stopped.

Memory is budgeted the same way: a worker may use its share of the memory available (its data
segment, RLIMIT_DATA), between MEMORY_FLOOR and MEMORY_CEILING, so that `-j N` workers cannot
take N times what a huge file needs. An item that needs more ends its worker (LibCST's parser
aborts when an allocation fails; a MemoryError ends it too) and is reported through `failed`;
the other items go on. A worker's stderr is closed to the terminal: a native abort's message
would be noise there, and the parent says what happened.

Where processes cannot be started (no fork, no semaphores, a process limit), the items run
here one after another, without a budget, and `notices` says so.

A worker never outlives the run: it is killed with its parent (Linux's parent-death signal;
elsewhere it sees the parent's end of its pipe close), so that killing only the parent, even
with SIGKILL, leaves no worker behind.
"""

from __future__ import annotations

import faulthandler
import math
import multiprocessing
import os
import signal
import sys
from collections import deque
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, TypeVar

from memlint import hostmemory
from memlint.collector import Intake, thaw_inherited
from memlint.interrupts import default_in_child

try:
    import resource
except ImportError:  # pragma: no cover - Windows: no CPU-time limits
    resource = None  # type: ignore[assignment]

Item = TypeVar("Item")
Result = TypeVar("Result")
Failed = Callable[[Any, str, str], Any]  # (item, "time" | "memory" | "" (the budget it ran out of), why)
Done = Callable[[int, Any], None]  # (item's index, its result): called here as each result comes
PR_SET_PDEATHSIG = 1
OUT_OF_MEMORY = 86  # a worker's exit status after a MemoryError
# LibCST's parser peaks at about 320 bytes per byte of source (measured on real files of 0.2 to
# 4 MiB): 1 GiB lints a 2.5 MiB file, 4 GiB anything under memlint's size limit (4 MiB).
MEMORY_FLOOR = 2**30
MEMORY_CEILING = 4 * 2**30
AHEAD = 2  # the items a lone forked worker holds: the one it runs, and the next waiting in its pipe


def cpu_count() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def budgets_enforced() -> bool:
    return resource is not None and hasattr(resource, "RLIMIT_CPU")


def available_memory() -> Optional[int]:
    """Bytes of memory available to new work: the kernel's estimate (Linux), else all of it."""
    found = hostmemory.available()
    if found is not None:
        return found
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def memory_budget(workers: int) -> int:
    """Bytes one of `workers` workers may use: its share of what is available, within bounds."""
    available = available_memory()
    share = available // max(1, workers) if available else MEMORY_CEILING
    return max(MEMORY_FLOOR, min(MEMORY_CEILING, share))


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


def _limit_memory(memory: int) -> None:
    """Let this process's data segment grow to `memory` bytes, no further."""
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        memory = min(memory, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (memory, hard))


def _quiet() -> None:
    """Nothing a worker prints reaches the terminal (a native abort's message, or the dump of
    a fault handler the run's process may have turned on)."""
    faulthandler.disable()
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
    except OSError:
        pass


def _serve(connection: Connection, others: List[Connection], function: Callable, budget: float,
           memory: int, parent: int, items: Optional[Sequence] = None, thaw: bool = False,
           start: Optional[Callable[[], None]] = None) -> None:
    """A worker: run the items the parent sends until it sends None. A forked worker holds
    the parent's `items` already, and is sent only their indices; `thaw`: it was forked while
    the parent held results frozen (memlint.collector.Intake); `start`: what it runs first."""
    _die_with(parent)
    if thaw:
        thaw_inherited()
    if start is not None:
        start()
    for other in others:  # the parent's ends of the other workers' pipes: theirs to see close
        other.close()
    default_in_child()  # Ctrl-C and the run's own stopping signals are the parent's to handle
    _quiet()
    if (budget or memory) and budgets_enforced():
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # ended by SIGXCPU or an abort: no core file
            if memory:
                _limit_memory(memory)
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
        if items is not None:
            item = items[index]
        if budget and budgets_enforced():
            _limit_cpu(budget)
        try:
            connection.send((index, True, function(item)))
        except MemoryError:  # over the memory budget: the parent is told by the exit status
            os._exit(OUT_OF_MEMORY)
        except Exception as error:  # `function` should not raise; if it does, one line, not a dead worker
            connection.send((index, False, f"{type(error).__name__}: {error}"))


class _Worker:
    def __init__(self, context, function: Callable, budget: float, memory: int, items: Sequence,
                 others: Sequence["_Worker"] = (), thaw: bool = False,
                 start: Optional[Callable[[], None]] = None, alone: bool = False) -> None:
        """A worker process for `items`: a forked one starts with them in its memory, so
        that a file's text and settings are not pickled through the pipe (a fifth of a
        run's bytes between processes, and their pickling both ways)."""
        self.connection, child = context.Pipe()
        self.forked = context.get_start_method() == "fork"
        self.process = context.Process(target=_serve, daemon=True, args=(
            child, [other.connection for other in others], function, budget, memory, os.getpid(),
            items if self.forked else None, thaw and self.forked, start))
        self.process.start()
        child.close()
        self.held: Deque[int] = deque()  # the items given, in order: it runs the first
        # Only a lone worker (`alone`) is handed items ahead, and only a forked one: its messages
        # are indexes, where another's hold whole items, and a parent blocked sending one to a
        # worker that is blocked sending its result back would wait forever.
        self.ahead = AHEAD if alone and self.forked else 1

    def give(self, index: int, item: object) -> None:
        self.held.append(index)
        try:
            self.connection.send((index, None if self.forked else item))
        except (BrokenPipeError, ConnectionResetError):  # it died on an item it held: reading
            pass  # its result finds it dead, and the items it held go to the next worker

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


def _over(exitcode: Optional[int], memory: int) -> str:
    """The budget a worker that ended with `exitcode` ran out of: "time", "memory" or ""."""
    if budgets_enforced() and exitcode == -getattr(signal, "SIGXCPU", 0):
        return "time"
    if memory and exitcode in (OUT_OF_MEMORY, -signal.SIGABRT):  # LibCST's parser aborts on a failed allocation
        return "memory"
    return ""


def _run_pool(function: Callable, items: Sequence, workers: int, size: Callable, budget: float,
              memory: int, failed: Failed, results: Dict[int, object], done: Done,
              start: Optional[Callable[[], None]]) -> None:
    context = _context()
    queue: Deque[int] = deque(sorted(range(len(items)), key=lambda i: -size(items[i])))
    pool: List[_Worker] = []
    intake = Intake()  # the results stay alive in this process: kept off the collector

    def fill(worker: _Worker, up_to: int) -> None:
        while queue and len(worker.held) < up_to:
            index = queue.popleft()
            worker.give(index, items[index])

    try:
        for _ in range(workers):
            pool.append(_Worker(context, function, budget, memory, items, pool, start=start, alone=workers == 1))
            fill(pool[-1], 1)
        for worker in pool:  # (each its largest item first, then the next ones)
            fill(worker, worker.ahead)
        while any(w.held for w in pool):
            busy = [w for w in pool if w.held]
            # (one worker busy: its result is read at once, or the end of its pipe if it died)
            ready = wait([w.connection for w in busy] + [w.process.sentinel for w in busy]) if len(busy) > 1 else ()
            for worker in busy:
                if ready and worker.connection not in ready and worker.process.sentinel not in ready:
                    continue
                index = worker.held.popleft()
                try:
                    _, ok, value = intake.take(worker.connection.recv)
                except (EOFError, OSError):  # the worker died running this item
                    worker.process.join()
                    code = worker.process.exitcode
                    over = _over(code, memory)
                    pool.remove(worker)
                    worker.connection.close()
                    queue.extendleft(reversed(worker.held))  # the items waiting for it go next
                    worker.held.clear()
                    if queue:
                        pool.append(_Worker(context, function, budget, memory, items, pool, intake.froze, start,
                                            alone=workers == 1))
                        fill(pool[-1], pool[-1].ahead)
                    results[index] = failed(items[index], over, _why(code))
                    done(index, results[index])
                    continue
                fill(worker, worker.ahead)
                results[index] = value if ok else failed(items[index], "", f"internal error ({value})")
                done(index, results[index])
    finally:
        for worker in pool:
            if worker.held:  # interrupted: do not wait for it
                worker.process.kill()
            worker.stop()
        intake.close()


def map_in_order(function: Callable[[Item], Result], items: Sequence[Item], jobs: int,
                 size: Callable[[Item], int], failed: Failed, budget: float = 0.0, memory: int = 0,
                 notices: Optional[List[str]] = None, done: Optional[Done] = None,
                 start: Optional[Callable[[], None]] = None) -> List[Result]:
    """[function(item) for item in items], over up to `jobs` worker processes, each item given
    `budget` seconds of CPU time and each worker `memory` bytes (0: no limit); an item that runs
    out, or whose worker dies, gets `failed(item, over, why)`. `function` must be a module-level
    function that raises nothing but MemoryError. `done(index, result)` is called in this
    process as each result comes in. `start()` runs first in each worker process (never here:
    it may change what only a process of its own should)."""
    done = done or (lambda index, result: None)
    results: Dict[int, object] = {}
    workers = min(jobs, len(items))
    if workers > 1 or (workers == 1 and (budget or memory) and budgets_enforced()):
        try:
            _run_pool(function, items, workers, size, budget, memory, failed, results, done, start)
        except (OSError, ImportError, NotImplementedError, ValueError) as error:
            if notices is not None:
                notices.append(f"cannot start worker processes ({type(error).__name__}: {error}); "
                               f"the files left were linted in this one, with no time or memory budget")
    for index, item in enumerate(items):
        if index not in results:
            try:
                results[index] = function(item)
            except MemoryError:
                results[index] = failed(item, "memory", "out of memory")
            done(index, results[index])
    return [results[index] for index in range(len(items))]  # type: ignore[misc]
