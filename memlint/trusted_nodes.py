"""Building the parser's nodes without the checks and look-ups meant for hand-made ones.

LibCST's native parser builds every node by calling its class with keywords: about six nodes
a line. A node class is a frozen dataclass with slots, whose generated `__init__` sets each
field through `object.__setattr__` (which looks the field up on the type every time), then
calls `__post_init__`, which checks the node: a guard for trees built by hand, where the
parser's own nodes are valid by construction. Memlint gives each node class, once, an
`__init__` made here from its fields, which takes the same arguments with the same defaults,
sets each slot through that slot's own descriptor, and checks the node unless memlint's
parser is running (`trusted_nodes`). Nodes that rules, fixes and other code build are checked
as ever; the parse takes 7% fewer instructions, and memlint as a whole 4.6% fewer. The classes
are changed once and for all, not around each parse: a class changed is a class whose look-ups
every specialised instruction that met its nodes does again, which cost a third of the saving.
(memlint parses in one thread at a time: a node another thread built during a parse would
go unchecked.)

In a process of memlint's own (a worker of a run, `unguard`), the node classes also lose the
guard that makes them frozen: the `__setattr__` and `__delattr__` the dataclass made, which
only raise. A class with them has no plain attribute stores, so each slot is set by a call
of its descriptor; without them, `self.name = value` sets the slot at once. Memlint never
changes a node (it makes new ones), and its rules' tests lint in the test run's own process,
guarded, so a rule that did would fail there; a process that hosts memlint (flake8, an
editor's server, a test run) keeps the guard. The parse takes 5.8% fewer instructions again,
memlint as a whole 2.8% (docs/speed.md, Speed41).
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from functools import lru_cache
from typing import Callable, Dict, Iterator, List, Tuple

import libcst as cst

# LibCST's `__post_init__` does nothing but check the node: skipping it skips only that
VALIDATES_ONLY = cst.CSTNode.__post_init__.__code__.co_names == ("_validate",)


@contextmanager
def trusted_nodes() -> Iterator[None]:
    """The nodes built within are set, not checked."""
    if VALIDATES_ONLY and not _TRUSTING:
        _put_in()
        _TRUSTING.append(False)
    if not _TRUSTING:  # (a LibCST whose `__post_init__` does more: its own `__init__`s, and checks)
        yield
        return
    trusting, _TRUSTING[0] = _TRUSTING[0], True
    try:
        yield
    finally:
        _TRUSTING[0] = trusting


# whether a parse is running, once the trusted `__init__`s are in (empty before): what they read
_TRUSTING: List[bool] = []


def _put_in() -> None:
    """Give each node class its trusted `__init__`."""
    for node_class, trusted in _trusted_inits():
        node_class.__init__ = trusted  # type: ignore[misc]


@lru_cache(maxsize=1)
def _trusted_inits() -> Tuple[Tuple[type, Callable[..., None]], ...]:
    """(class, its trusted `__init__`) for each concrete node class whose `__init__` the
    dataclass made from fields that all have a slot."""
    found: List[Tuple[type, Callable[..., None]]] = []
    pending = [cst.CSTNode]
    seen = set()
    while pending:
        node_class = pending.pop()
        for subclass in node_class.__subclasses__():
            if subclass not in seen:
                seen.add(subclass)
                pending.append(subclass)
                trusted = _trusted_init(subclass)
                if trusted is not None:
                    found.append((subclass, trusted))
    return tuple(found)


def _trusted_init(node_class: type) -> "Callable[..., None] | None":
    """An `__init__` taking what the dataclass's takes, by position or keyword, with the same
    defaults (a factory called when its field is not given), that sets each slot and checks
    the node only outside a parse; None for a class it would not build alike: one not LibCST's
    own (another library's node class may take more, an `InitVar`), an abstract one, one
    without slots (LibCST keeps the class it made before adding them among the subclasses),
    one with a field `__init__` does not take."""
    own = node_class.__dict__
    if not node_class.__module__.startswith("libcst.") or not dataclasses.is_dataclass(node_class) or \
            "__slots__" not in own or "__init__" not in own or getattr(node_class, "__abstractmethods__", None):
        return None
    fields = dataclasses.fields(node_class)
    if not all(field.init for field in fields):
        return None
    names: Dict[str, object] = {"_missing": dataclasses.MISSING, "_trusting": _TRUSTING}
    params: List[str] = []
    body: List[str] = []
    stored = node_class.__setattr__ is object.__setattr__  # (unguarded: a plain store sets the slot)
    for position, field in enumerate(fields):
        slot = next((klass.__dict__[field.name] for klass in node_class.__mro__ if field.name in klass.__dict__), None)
        if not hasattr(slot, "__set__"):
            return None
        if not stored:
            names[f"_set{position}"] = slot.__set__  # type: ignore[union-attr]
        value = field.name
        if field.default is not dataclasses.MISSING:
            names[f"_default{position}"] = field.default
            params.append(f"{field.name}=_default{position}")
        elif field.default_factory is not dataclasses.MISSING:
            names[f"_factory{position}"] = field.default_factory
            params.append(f"{field.name}=_missing")
            value = f"_factory{position}() if {field.name} is _missing else {field.name}"
        else:
            params.append(field.name)
        body.append(f"self.{field.name} = {value}" if stored else f"_set{position}(self, {value})")
    code = (f"def make({', '.join(names)}):\n"
            f"    def __init__(self, {', '.join(params)}):\n"
            + "".join(f"        {line}\n" for line in body)
            + "        if not _trusting[0]:\n            self.__post_init__()\n"
            + "    return __init__\n")
    namespace: Dict[str, Callable[..., Callable[..., None]]] = {}
    exec(compile(code, f"<trusted {node_class.__name__}>", "exec"), namespace)
    init = namespace["make"](*names.values())
    init.__qualname__ = f"{node_class.__qualname__}.__init__"
    return init


def unguard() -> None:
    """Drop the frozen guard of LibCST's node classes in this process (the module's docstring
    says why; only in a process of memlint's own). A guard is dropped only where it does
    nothing but raise FrozenInstanceError, from every class of a node class's ancestry, and
    the trusted `__init__`s are made again to store their fields plainly."""
    if not VALIDATES_ONLY:
        return
    for node_class, _ in _trusted_inits():
        for klass in node_class.__mro__:
            for name in ("__setattr__", "__delattr__"):
                guard = klass.__dict__.get(name)
                if guard is not None and klass.__module__.startswith("libcst.") and _only_guards(guard):
                    delattr(klass, name)
    _trusted_inits.cache_clear()
    if _TRUSTING:  # already put in: the new ones replace them
        _put_in()


def _only_guards(method: object) -> bool:
    """Whether `method` is the dataclass's frozen guard: it names FrozenInstanceError (its
    closure holds it) and calls nothing but `type` and the next class's method."""
    code = getattr(method, "__code__", None)
    return code is not None and "FrozenInstanceError" in code.co_freevars + code.co_names and \
        set(code.co_names) <= {"type", "super", "__setattr__", "__delattr__"}
