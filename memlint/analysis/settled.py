"""Settled values: what a loop reads the same on every iteration.

A wait for the device on such a value (`self.decoder.r.item()` in a decoder's loop over time
steps) can be made once before the loop, for the same number. A value is settled in a loop
when it is a name or an attribute chain (`n`, `self.decoder.r`) that

- the loop neither rebinds nor changes in place (memlint.analysis.loops: `is_invariant`);
- for an attribute chain: no statement of the loop, or of a function of this module it calls,
  stores any attribute of the chain; and no code of this module stores them or changes them in
  place (`self.step += 1`, `self.r.fill_(2)`) outside `__init__` and a property's setter, since
  a module the loop calls (`self.decoder(...)`, not followed) may run that code.

Asked as `facts.settled`, by MEM105.
"""

from __future__ import annotations

from functools import cached_property
from typing import Dict, FrozenSet, Set

import libcst as cst

from memlint.analysis.calls import CallGraph
from memlint.analysis.dataflow import stored_attributes
from memlint.analysis.loops import Loop, LoopFacts
from memlint.analysis.scopes import Scopes
from memlint.analysis.tree import TreeIndex, dotted_name, walk

_BINDINGS = (cst.Assign, cst.AugAssign, cst.AnnAssign)


class Settled:
    def __init__(self, tree: TreeIndex, scopes: Scopes, calls: CallGraph) -> None:
        self.tree = tree
        self.scopes = scopes
        self.calls = calls
        self._stored: Dict[int, FrozenSet[str]] = {}  # id(loop) -> attribute names it stores

    def in_loop(self, value: cst.BaseExpression, loop: Loop, facts: LoopFacts) -> bool:
        """`value` reads the same on every iteration of `loop` (see the module docstring)."""
        chain = dotted_name(value)
        if chain is None or not facts.is_invariant(value):
            return False
        attributes = chain.split(".")[1:]
        if not attributes:
            return True
        stored = self._stored_in(loop)
        return not any(name in stored or name in self._changed_after_construction for name in attributes)

    def _stored_in(self, loop: Loop) -> FrozenSet[str]:
        found = self._stored.get(id(loop))
        if found is None:
            names: Set[str] = set()
            for root in [loop.body, *(f.body for f in self.calls.functions_reached(loop))]:
                for node in walk(root):
                    if isinstance(node, _BINDINGS):
                        names |= _stored_by(node)
            found = self._stored[id(loop)] = frozenset(names)
        return found

    @cached_property
    def _changed_after_construction(self) -> FrozenSet[str]:
        """Attribute names this module stores or changes in place outside `__init__` and
        property setters."""
        names: Set[str] = set()
        for node, scope in self.tree.listed:
            if isinstance(node, _BINDINGS):
                if not _constructs(scope):
                    names |= _stored_by(node)
            elif type(node) is cst.Call and type(node.func) is cst.Attribute:  # type: ignore[attr-defined]
                method = node.func.attr.value  # type: ignore[attr-defined]
                owner = node.func.value  # type: ignore[attr-defined]
                if method.endswith("_") and not method.startswith("_") and type(owner) is cst.Attribute \
                        and not _constructs(scope):
                    names.add(owner.attr.value)  # `self.r.fill_(2)`
        return frozenset(names)


def _constructs(scope: cst.CSTNode) -> bool:
    """`scope` is an `__init__` or a property's setter (`@r.setter`): code that sets what the
    object holds, not code a step runs."""
    if type(scope) is not cst.FunctionDef:
        return False
    if scope.name.value == "__init__":  # type: ignore[attr-defined]
        return True
    return any(type(d.decorator) is cst.Attribute and d.decorator.attr.value == "setter"  # type: ignore[attr-defined]
               for d in scope.decorators)  # type: ignore[attr-defined]


def _stored_by(binding: cst.CSTNode) -> Set[str]:
    targets = [t.target for t in binding.targets] if type(binding) is cst.Assign else [binding.target]  # type: ignore[attr-defined]
    return {name for target in targets for name in stored_attributes(target)}
