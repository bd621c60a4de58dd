"""Keeping CPython's cycle collector off a file's tree while the file is linted.

A LibCST tree is 15 to 20 objects a line (75,000 for a 4,800-line file), all alive until the
file is done. The cycle collector runs whenever enough objects were made since its last run,
and each run traverses the objects of its generations: while the parser makes the tree, every
run finds nothing to free, and once the tree is in the oldest generation, every full run
traverses it again. On the training-loop files of the real corpus that was a tenth of the lint.

So the collector is off while the parser makes the tree (it makes no garbage), and the tree is
frozen (`gc.freeze`: moved out of every generation, never traversed) before the collector is
turned back on: turned on first, its next run, due at once after the thousands of objects made
meanwhile, would traverse the whole new tree (on the training-loop files, a millisecond a file,
three quarters of all collection time). The analysis then runs with the collector on and the
tree out of its reach, and the tree is thawed when the file is done. A tree is acyclic once the
engine has closed the file's context, so it is freed by its reference count and never waits for
a full collection. Objects the analysis makes are still collected as usual.

The collector is left alone when the host process manages it: when it is off, or when the
host has frozen objects itself (thawing ours would thaw theirs).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")


def _host_manages_it() -> bool:
    return not gc.isenabled() or gc.get_freeze_count() > 0


@contextmanager
def paused() -> Iterator[None]:
    """No collection while the block runs (it makes objects that all stay alive)."""
    if _host_manages_it():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextmanager
def kept_from_collector() -> Iterator[Callable[[], None]]:
    """The collector off until `settle()` is called (once the tree is made), which freezes
    everything alive and turns the collector back on; thawed when the block ends."""
    if _host_manages_it():
        yield lambda: None
        return
    settled = False

    def settle() -> None:
        nonlocal settled
        gc.freeze()  # with the collector still off: the new objects never meet a collection
        settled = True
        gc.enable()

    gc.disable()
    try:
        yield settle
    finally:
        if settled:
            gc.unfreeze()
        else:
            gc.enable()


class Intake:
    """A process that takes in results which all stay alive until it is done with them (the
    run's own process, over its workers: each file's findings and its module's summary) keeps
    the collector off each result. Taken in with the collector on, the results would be
    traversed by every full collection while they pile up (about a seventh of that process's
    CPU time over the real-code corpus, docs/speed.md); each one is frozen as it comes
    in instead, and all are thawed when the intake closes. A worker forked meanwhile thaws
    what it inherited frozen (`thaw_inherited`), so that its own `kept_from_collector` works.
    Left alone, as the rest, when the host manages the collector."""

    def __init__(self) -> None:
        self._active = not _host_manages_it()
        self.froze = False  # whether anything is frozen now: a worker forked now is to thaw it

    def take(self, receive: Callable[[], T]) -> T:
        if not self._active:
            return receive()
        gc.disable()
        try:
            return receive()
        finally:
            gc.freeze()
            self.froze = True
            gc.enable()

    def close(self) -> None:
        if self.froze:
            gc.unfreeze()
            self.froze = False


def thaw_inherited() -> None:
    """In a worker forked while its parent's intake held results frozen: thaw them here."""
    gc.unfreeze()
