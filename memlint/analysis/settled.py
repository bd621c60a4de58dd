"""Settled values: what a loop reads the same on every iteration.

A wait for the device on such a value (`self.decoder.r.item()` in a decoder's loop over time
steps) can be made once before the loop, for the same number. A value is settled in a loop
when it is an attribute chain of `self` (`self.decoder.r`) that the loop does not rebind, and
no code of this module can change:

- no statement stores any attribute of the chain, wherever it sits in a target (`self.r =`,
  `self.r.data += 1`, `self.r[0] = 3`, `a, self.r = ...`), nor calls an in-place method on a
  receiver that reads one (`self.r.add_(1)`, `self.r.data.fill_(2)`), nor hands one to `out=`,
  nor names one to `setattr`, nor binds one to a name (`r = self.r`, which may be changed in
  place under that name), outside `__init__` and a property's setter;
- the classes along the chain (the loop's, then the class of each attribute's one value, the
  decoder's) derive from torch's modules, Lightning's, `object` and classes of this module alone
  (`own_lineage`): a base class of another module may change their attributes unseen (`def
  advance(self): self.t += 1`); and the module stores no attribute by a name it computes
  (`setattr(self, k, v)`, `__dict__`).

A name of the function, which a helper may change in place (`bump(count)`), is never settled.
Asked as `facts.settled`, by MEM105.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import FrozenSet, List, Set, Tuple

import libcst as cst

from memlint.analysis.dataflow import binding_targets, stored_attributes
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import TreeIndex, dotted_name, walk

_BINDINGS = (cst.Assign, cst.AugAssign, cst.AnnAssign)
# Bases whose code changes no attribute of a subclass's own: torch's module, a framework's
_ROOT_BASES = re.compile(r"^(torch\.nn\.|pytorch_lightning\.|lightning\.|typing\.Generic)")


class Settled:
    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes) -> None:
        self.names = names
        self.tree = tree
        self.scopes = scopes

    def in_loop(self, value: cst.BaseExpression, loop: cst.CSTNode) -> bool:
        """`value` reads the same on every iteration of `loop` (see the module docstring)."""
        chain = dotted_name(value)
        if chain is None or not chain.startswith("self.") or self._anything_changeable:
            return False
        parts = chain.split(".")[1:]
        klass = self.tree.class_of(self.tree.function_of(loop))  # type: ignore[arg-type]
        for part in parts[:-1]:  # `self.decoder.r`: the loop's class, then the decoder's
            if klass is None or not own_lineage(klass, self.scopes, self.names):
                return False
            values = self.scopes.attribute_values(klass, part)
            kinds = {v.func.value for v in values if type(v) is cst.Call and type(v.func) is cst.Name}  # type: ignore[attr-defined]
            klass = self.scopes.classes.get(kinds.pop()) if len(kinds) == 1 and len(values) == 1 else None
        if klass is None or not own_lineage(klass, self.scopes, self.names):
            return False
        return not any(name in self._changeable for name in parts)

    @cached_property
    def _anything_changeable(self) -> bool:
        return stores_any_attribute(self.scopes)

    @cached_property
    def _changeable(self) -> FrozenSet[str]:
        """Attribute names code of this module may change outside `__init__` and property
        setters (see the module docstring)."""
        names: Set[str] = set()
        assigned = self._assigned_after_construction
        for node, scope in self.tree.listed:
            if _constructs(scope, assigned):
                continue
            kind = type(node)
            if kind in _BINDINGS:
                for target in binding_targets(node):
                    names |= _attributes_in(target)
                value = node.value if kind is cst.Assign else None  # type: ignore[attr-defined]
                for aliased in (value.elements if type(value) in (cst.Tuple, cst.List) else [value]):  # type: ignore[union-attr]
                    if type(aliased) is cst.Element:
                        aliased = aliased.value  # type: ignore[union-attr]
                    if type(aliased) is cst.Attribute:
                        names |= _attributes_in(aliased)  # `r = self.r`: an alias to change in place
            elif kind is cst.Call:
                func = node.func  # type: ignore[attr-defined]
                last = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""
                if last.endswith("_") and not last.startswith("_"):  # `self.r.add_(1)`, `nn.init.constant_(self.r, 2)`
                    if type(func) is cst.Attribute:
                        names |= _attributes_in(func.value)
                    for arg in node.args:  # type: ignore[attr-defined]
                        names |= _attributes_in(arg.value)
                if last in ("register_buffer", "register_parameter") and node.args and \
                        type(node.args[0].value) is cst.SimpleString:  # type: ignore[attr-defined]
                    names.add(node.args[0].value.evaluated_value)  # registered again outside `__init__`  # type: ignore[attr-defined]
                for arg in node.args:  # type: ignore[attr-defined]
                    if arg.keyword is not None and arg.keyword.value == "out":
                        names |= _attributes_in(arg.value)
                if type(func) is cst.Name and func.value == "setattr" and len(node.args) > 1 and \
                        type(node.args[1].value) is cst.SimpleString:  # type: ignore[attr-defined]
                    names.add(node.args[1].value.evaluated_value)  # type: ignore[attr-defined]
        return frozenset(names)

    @cached_property
    def _assigned_after_construction(self) -> FrozenSet[str]:
        """Attribute names assigned outside `__init__` (`self.rf = 1` calls the setter of the
        property `rf`: what that setter stores then changes too)."""
        names: Set[str] = set()
        for node, scope in self.tree.listed:
            if type(node) in _BINDINGS and not _constructs(scope, frozenset()):
                for target in binding_targets(node):
                    names |= stored_attributes(target)
        return frozenset(names)


def stores_any_attribute(scopes: Scopes) -> bool:
    """The module may store any attribute: `setattr` with a name that is no literal,
    `__dict__`, `vars(...).update(...)`."""
    for call in scopes.calls:
        func = call.func
        if type(func) is cst.Name and func.value == "setattr" and (
                len(call.args) < 2 or type(call.args[1].value) is not cst.SimpleString):
            return True
        if type(func) is cst.Attribute and type(func.value) is cst.Attribute and \
                func.value.attr.value == "__dict__":  # type: ignore[attr-defined]
            return True
        if type(func) is cst.Attribute and func.attr.value == "update" and type(func.value) is cst.Call and \
                type(func.value.func) is cst.Name and func.value.func.value == "vars":  # type: ignore[attr-defined]
            return True
    return False


def lineage(klass: cst.ClassDef, scopes: Scopes) -> Tuple[List[cst.ClassDef], List[cst.Arg]]:
    """`klass` and the classes of this module it derives from, at any depth; and the bases of
    those that are not classes of this module."""
    found, foreign = [klass], []
    for current in found:  # (grows as it goes: each class's bases once)
        for base in current.bases:
            local = scopes.classes.get(dotted_name(base.value) or "")
            if local is None:
                foreign.append(base)
            elif all(local is not seen for seen in found):
                found.append(local)
    return found, foreign


def own_lineage(klass: cst.ClassDef, scopes: Scopes, names: TorchNames) -> bool:
    """`klass` derives from torch's modules, Lightning's, `object` and classes of this module
    that do too: no base of another module's can set or change its attributes unseen."""
    return all(dotted_name(base.value) == "object" or _ROOT_BASES.match(names.qualified_name(base.value) or "")
               for base in lineage(klass, scopes)[1])


def _attributes_in(node: cst.CSTNode) -> Set[str]:
    """Every attribute name an expression or a target spells (`self.r.data[0]`: r, data)."""
    return {n.attr.value for n in walk(node) if type(n) is cst.Attribute}  # type: ignore[attr-defined]


def _constructs(scope: cst.CSTNode, assigned: FrozenSet[str]) -> bool:
    """`scope` is an `__init__`, or a property's setter (`@r.setter`) that no code of this
    module outside `__init__` calls by assigning the property (`assigned`: the attribute names
    it assigns there): code that sets what the object holds, not code a step runs."""
    if type(scope) is not cst.FunctionDef:
        return False
    if scope.name.value == "__init__":  # type: ignore[attr-defined]
        return True
    return scope.name.value not in assigned and any(  # type: ignore[attr-defined]
        type(d.decorator) is cst.Attribute and d.decorator.attr.value == "setter"  # type: ignore[attr-defined]
        for d in scope.decorators)  # type: ignore[attr-defined]
