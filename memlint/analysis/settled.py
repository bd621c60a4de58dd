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
- the class of the function the loop is in derives from `nn.Module` (or `object`) and classes
  of this module alone (`own_lineage`): a base class of another module may change its
  attributes unseen (`def advance(self): self.t += 1`).

A name of the function, which a helper may change in place (`bump(count)`), is never settled.
Asked as `facts.settled`, by MEM105.
"""

from __future__ import annotations

from functools import cached_property
from typing import FrozenSet, Set

import libcst as cst

from memlint.analysis.dataflow import leaf_targets
from memlint.analysis.scopes import Scopes
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import TreeIndex, dotted_name, walk

_BINDINGS = (cst.Assign, cst.AugAssign, cst.AnnAssign)
_ROOT_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})


class Settled:
    def __init__(self, names: TorchNames, tree: TreeIndex, scopes: Scopes) -> None:
        self.names = names
        self.tree = tree
        self.scopes = scopes

    def in_loop(self, value: cst.BaseExpression, loop: cst.CSTNode) -> bool:
        """`value` reads the same on every iteration of `loop` (see the module docstring)."""
        chain = dotted_name(value)
        if chain is None or not chain.startswith("self.") or chain.count(".") < 1:
            return False
        klass = self.tree.class_of(self.tree.function_of(loop))  # type: ignore[arg-type]
        if klass is None or not own_lineage(klass, self.scopes, self.names):
            return False
        return not any(name in self._changeable for name in chain.split(".")[1:])

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
                targets = [t.target for t in node.targets] if kind is cst.Assign else [node.target]  # type: ignore[attr-defined]
                for target in targets:
                    names |= _attributes_in(target)
                if kind is cst.Assign and type(node.value) is cst.Attribute:  # type: ignore[attr-defined]
                    names |= _attributes_in(node.value)  # `r = self.r`: an alias to change in place  # type: ignore[attr-defined]
            elif kind is cst.Call:
                func = node.func  # type: ignore[attr-defined]
                if type(func) is cst.Attribute and func.attr.value.endswith("_") and \
                        not func.attr.value.startswith("_"):
                    names |= _attributes_in(func.value)  # `self.r.data.add_(1)`
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
                targets = [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]  # type: ignore[attr-defined]
                for target in targets:
                    names |= {leaf.attr.value for leaf in leaf_targets(target) if type(leaf) is cst.Attribute}  # type: ignore[attr-defined]
        return frozenset(names)


def own_lineage(klass: cst.ClassDef, scopes: Scopes, names: TorchNames) -> bool:
    """`klass` derives from `nn.Module`, `object` and classes of this module that do too: no
    base of another module's can set or change its attributes unseen."""
    pending, seen = [klass], {klass.name.value}
    while pending:
        for base in pending.pop().bases:
            name = dotted_name(base.value) or ""
            local = scopes.classes.get(name)
            if local is None:
                if name != "object" and names.qualified_name(base.value) not in _ROOT_BASES:
                    return False
            elif local.name.value not in seen:
                seen.add(local.name.value)
                pending.append(local)
    return True


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
