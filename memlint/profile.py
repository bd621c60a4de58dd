"""`--profile`: where a run's time goes, per phase (read, compile, parse, ...), per rule and per fact.

A Timer charges wall time to the innermost label open, so every second is counted once: a
fact computed while a rule's handler runs is charged to the fact, not the rule. Rules are timed
by the engine around their handlers; facts by wrapping, for a profiled run only, the methods of
the classes in memlint.analysis (whatever they are: a new fact class is covered without more
code). A fact method that returns an iterator is charged for making it; the iterating is
charged to whoever iterates.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from contextlib import contextmanager
from time import perf_counter
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

_current: Optional["Timer"] = None  # the timer of the file being linted, while one is


class Timer:
    """Exclusive wall time per label, for one file."""

    def __init__(self) -> None:
        self._totals: Dict[str, float] = {}
        self._stack: List[str] = []
        self._mark = perf_counter()

    def _charge(self, now: float) -> None:
        if self._stack:
            label = self._stack[-1]
            self._totals[label] = self._totals.get(label, 0.0) + now - self._mark
        self._mark = now

    def push(self, label: str) -> None:
        self._charge(perf_counter())
        self._stack.append(label)

    def pop(self) -> None:
        self._charge(perf_counter())
        self._stack.pop()

    @contextmanager
    def phase(self, label: str) -> Iterator[None]:
        self.push(label)
        try:
            yield
        finally:
            self.pop()

    @contextmanager
    def active(self) -> Iterator[None]:
        """Facts computed meanwhile are charged to this timer."""
        global _current
        outer, _current = _current, self
        instrument_facts()
        try:
            yield
        finally:
            _current = outer

    def totals(self) -> Dict[str, float]:
        return dict(self._totals)


def timed(function: Callable, label: str, timer: Timer) -> Callable:
    """`function`, charging its time to `label` on `timer`."""
    def call(*args, **kwargs):
        timer.push(label)
        try:
            return function(*args, **kwargs)
        finally:
            timer.pop()
    return call


def _fact(function: Callable, label: str) -> Callable:
    @functools.wraps(function)
    def call(*args, **kwargs):
        timer = _current
        if timer is None:
            return function(*args, **kwargs)
        timer.push(label)
        try:
            return function(*args, **kwargs)
        finally:
            timer.pop()
    return call


_instrumented = False


def instrument_facts() -> None:
    """Wrap the methods and properties of every class in memlint.analysis (once per process)."""
    global _instrumented
    if _instrumented:
        return
    _instrumented = True
    import memlint.analysis as package

    modules = [package] + [importlib.import_module(f"{package.__name__}.{info.name}")
                           for info in pkgutil.iter_modules(package.__path__)]
    for module in modules:
        short = module.__name__.rsplit(".", 1)[-1]
        for cls in [c for c in vars(module).values() if inspect.isclass(c) and c.__module__ == module.__name__]:
            for name, value in list(vars(cls).items()):
                if name.startswith("__") and name != "__init__":
                    continue
                label = f"fact {short}.{cls.__name__}.{name}"
                if isinstance(value, property) and value.fget is not None:
                    setattr(cls, name, property(_fact(value.fget, label), value.fset, value.fdel, value.__doc__))
                elif isinstance(value, functools.cached_property):
                    wrapped = functools.cached_property(_fact(value.func, label))
                    wrapped.__set_name__(cls, name)
                    setattr(cls, name, wrapped)
                elif isinstance(value, (staticmethod, classmethod)):
                    setattr(cls, name, type(value)(_fact(value.__func__, label)))
                elif inspect.isfunction(value):
                    setattr(cls, name, _fact(value, label))


def _section(title: str, rows: Sequence[Tuple[str, float]], total: float, limit: int) -> List[str]:
    if not rows:
        return []
    lines = [f"{title:<52}{'seconds':>9}{'share':>8}"]
    for label, seconds in rows[:limit]:
        lines.append(f"  {label:<50}{seconds:>9.3f}{seconds / total:>8.1%}")
    if len(rows) > limit:
        rest = sum(seconds for _, seconds in rows[limit:])
        lines.append(f"  {f'({len(rows) - limit} more)':<50}{rest:>9.3f}{rest / total:>8.1%}")
    return lines


def report(files: Sequence[Tuple[str, Mapping[str, float]]], wall: float, jobs: int) -> List[str]:
    """The profile of a run: the slowest files, then the time per phase, rule and fact."""
    totals: Dict[str, float] = {}
    for _, seconds in files:
        for label, value in seconds.items():
            totals[label] = totals.get(label, 0.0) + value
    total = sum(totals.values()) or 1e-9
    ranked = sorted(totals.items(), key=lambda item: -item[1])
    slowest = sorted(((name, sum(seconds.values())) for name, seconds in files), key=lambda item: -item[1])
    lines = [f"profile: {len(files)} files, {total:.2f} s of work ({wall:.2f} s wall, {jobs} "
             f"job{'s' if jobs != 1 else ''})"]
    lines += _section("slowest files", slowest, total, 10)
    lines += _section("phases", [(k, v) for k, v in ranked if not k.startswith(("rule ", "fact "))], total, 20)
    lines += _section("rules (their own time; facts they ask for are below)",
                      [(k[5:], v) for k, v in ranked if k.startswith("rule ")], total, 40)
    lines += _section("facts", [(k[5:], v) for k, v in ranked if k.startswith("fact ")], total, 25)
    return lines
