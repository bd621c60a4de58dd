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
from typing import Callable, Iterator


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
