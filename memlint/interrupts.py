"""Stopping a run on a signal, cleanly: Ctrl-C (SIGINT), SIGTERM (a CI job cancelled, `kill`)
and SIGHUP (the terminal closed) all raise Interrupted in the main thread, so that what a run
started is stopped on the way out (worker processes, verifier runs on the GPU) and the command
exits 128 + the signal's number, as a shell reports it. A signal the process was started
ignoring (`nohup` ignores SIGHUP) stays ignored.

Writing a file is not cut short: signals are held while a fix is written and its file noted
(`held`), and delivered once it is, so that a run stopped midway names every file it rewrote.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator, List, Sequence

STOPPING = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class Interrupted(KeyboardInterrupt):
    """The run was stopped by `signum`; `rewritten`: the files it had fixed by then."""

    def __init__(self, signum: int = signal.SIGINT, rewritten: Sequence[str] = ()) -> None:
        super().__init__(signum)
        self.signum = signum
        self.rewritten: List[str] = list(rewritten)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def message(self) -> str:
        """One line: what stopped the run, and which files it had already fixed."""
        what = "interrupted" if self.signum == signal.SIGINT else f"stopped by {signal.Signals(self.signum).name}"
        if not self.rewritten:
            return what
        count = len(self.rewritten)
        return f"{what}; fixes were written to {count} file{'' if count == 1 else 's'}: {', '.join(self.rewritten)}"


def _raise(signum: int, frame) -> None:
    raise Interrupted(signum)


@contextmanager
def stopping_on_signals() -> Iterator[None]:
    """While the block runs, SIGINT, SIGTERM and SIGHUP raise Interrupted (unless ignored)."""
    previous = {}
    for number in STOPPING:
        try:
            if signal.getsignal(number) is not signal.SIG_IGN:
                previous[number] = signal.signal(number, _raise)
        except ValueError:  # not the main thread: signals are not this code's to handle
            break
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextmanager
def held() -> Iterator[None]:
    """The stopping signals are held (blocked) while the block runs, and delivered after it."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def default_in_child() -> None:
    """In a worker process forked from a run: SIGINT is ignored (Ctrl-C reaches the whole
    process group, and the parent decides); SIGTERM and SIGHUP, where the parent raised
    Interrupted on them, end the worker at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for number in STOPPING:
        if signal.getsignal(number) is _raise:
            signal.signal(number, signal.SIG_DFL)
