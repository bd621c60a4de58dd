"""`except` handlers that catch an out-of-memory error, and the calls in them that run the failed
work again.

Asked as `facts.oom`:

- `handlers` (`OomHandler`): an `except` that catches `torch.cuda.OutOfMemoryError` or
  `torch.OutOfMemoryError` (alone or in a tuple), or a broader `RuntimeError` / `Exception` /
  bare `except` whose body tests for out of memory: `if "out of memory" in str(e):` (any
  string holding "out of memory"), or a helper named for it (`if is_oom_error(e):`). Its `path`
  is what runs when the error is an out-of-memory one: the whole body for the classes; the body
  of the testing `if`, or the statements after `if "out of memory" not in str(e): raise`;
- `retries(handler)`: calls on that path that run the work again while the handler runs: a model
  forward or a backward (also inside a helper of this module the call reaches), or a call of
  the function the failed `try` is in (`return self.valid_step(sample, raise_oom=True)`).

While the handler runs, the exception is alive, and its traceback holds every frame the failed
step went through, with their locals: the activations of the step that did not fit. A retry
there runs on top of them. Asked by MEM504.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import List, Optional, Sequence, Tuple

import libcst as cst

from memlint.analysis.calls import CallGraph
from memlint.analysis.roles import Roles
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import TreeIndex, dotted_name, expression_nodes, last_part

OOM_CLASSES = frozenset({"torch.cuda.OutOfMemoryError", "torch.OutOfMemoryError"})
_BROAD = frozenset({"RuntimeError", "Exception", "BaseException"})
_OOM_TEXT = re.compile(r"out of memory", re.IGNORECASE)
_OOM_HELPER = re.compile(r"^(is_)?(cuda_)?(oom|out_of_memory)(_error|_exception)?$", re.IGNORECASE)


@dataclass(frozen=True)
class OomHandler:
    handler: cst.ExceptHandler
    attempt: cst.Try  # the try whose body ran out of memory
    path: Tuple[cst.BaseStatement, ...]  # what runs when the error is an out-of-memory one


def _mentions_oom(node: cst.CSTNode) -> bool:
    """A string saying "out of memory", or a call of a helper named for it (`is_oom_error(e)`)."""
    for part in expression_nodes(node):
        if type(part) is cst.SimpleString and _OOM_TEXT.search(part.value):
            return True
        if type(part) is cst.Call and _OOM_HELPER.match(last_part(dotted_name(part.func))):
            return True
    return False


def _tested(test: cst.BaseExpression) -> Optional[bool]:
    """True when `test` holds only for out of memory (`"out of memory" in str(e)`, also `and`
    another condition), False when it holds for every other error (`... not in str(e)`,
    `not is_oom(e)`), None when it is no such test."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = _tested(test.expression)
        return None if inner is None else not inner
    if type(test) is cst.BooleanOperation:
        sides = (_tested(test.left), _tested(test.right))
        if type(test.operator) is cst.And:
            return True if True in sides else None
        return False if False in sides else None  # `x or not oom`: holds for other errors too
    if type(test) is cst.Comparison and _mentions_oom(test):
        if any(type(c.operator) is cst.NotIn for c in test.comparisons):
            return False
        return True
    if type(test) is cst.Call and _mentions_oom(test):
        return True
    return None


def _path(body: Sequence[cst.BaseStatement]) -> Optional[Tuple[cst.BaseStatement, ...]]:
    """The statements of a broad handler's body that run for out of memory; None without a test."""
    for position, stmt in enumerate(body):
        if type(stmt) is cst.If:
            holds = _tested(stmt.test)
            if holds is True:
                return tuple(stmt.body.body)  # type: ignore[arg-type]
            if holds is False:
                return tuple(body[position + 1:])
    return None


class OutOfMemory:
    """Out-of-memory handlers of one module (see the module docstring)."""

    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes, calls: CallGraph, roles: Roles) -> None:
        self.names = names
        self.tree = tree
        self.scopes = scopes
        self.calls = calls
        self.roles = roles

    @cached_property
    def handlers(self) -> List[OomHandler]:
        found: List[OomHandler] = []
        for node in self.tree.nodes:
            if type(node) is not cst.Try:
                continue
            for handler in node.handlers:  # type: ignore[attr-defined]
                path = self._oom_path(handler)
                if path:
                    found.append(OomHandler(handler, node, path))  # type: ignore[arg-type]
        return found

    def _caught(self, handler: cst.ExceptHandler) -> List[str]:
        kind = handler.type
        if kind is None:
            return ["BaseException"]
        elements = [e.value for e in kind.elements] if type(kind) is cst.Tuple else [kind]
        caught = []
        for element in elements:
            name = self.names.qualified_name(element) or dotted_name(element)
            if name is not None:
                caught.append(name)
        return caught

    def _oom_path(self, handler: cst.ExceptHandler) -> Optional[Tuple[cst.BaseStatement, ...]]:
        caught = self._caught(handler)
        body = tuple(handler.body.body)  # type: ignore[arg-type]
        if any(name in OOM_CLASSES for name in caught):
            return body
        if any(name in _BROAD for name in caught):
            return _path(body)
        return None

    def retries(self, found: OomHandler) -> List[cst.Call]:
        """Calls on the handler's out-of-memory path that run the work again, in source order."""
        enclosing = self.tree.function_of(found.attempt)
        retried: List[cst.Call] = []
        for stmt in found.path:
            if type(stmt) in (cst.FunctionDef, cst.ClassDef):
                continue  # defined there, not run
            sites = {id(site) for _, site in self.roles.forwards_in(stmt)}
            sites |= {id(site) for _, site in self.roles.backwards_in(stmt)}
            for node in self.tree.walk_scope(stmt):
                if not type(node) is cst.Call:
                    continue
                again = id(node) in sites or self.roles.is_generate(node) or \
                    (enclosing is not None and self.scopes.resolve(node) is enclosing)
                if again:
                    retried.append(node)
        return retried
