"""Layers: the module classes a model of this module builds once per layer.

A model's `forward` runs once per step; the forward of a class the model builds once per layer
(`nn.ModuleList(Block(config) for _ in range(n_layer))`) runs once per layer, on every step. A
host-device wait there (a KV cache's `input_pos.max().item()`) is paid once per layer per step
or generated token. A module class is a layer where, in a method of a module class, this module
builds one

- per element of a list, set or generator comprehension (`[Block(c) for _ in range(n)]`), or
  per iteration of a loop that appends it (`layers.append(Block(c))`, `self.add_module(name,
  Block(c))`): a sequence of layers, each run in turn. Not a dict of alternatives
  (`nn.ModuleDict({split: Accuracy() for split in splits})`: one runs per step), nor one built
  in a loop's iterable (evaluated once), nor one a loop binds to a name or an attribute (the
  last one is kept);
- in `__init__` of a layer (`self.attn = CausalSelfAttention(config)` in a block);
- in a method of a layer that a method of a module class calls on each element of a loop
  (`for block in self.h: block.attn.kv_cache = block.attn.build_kv_cache(...)`).

Only this module's classes and their constructions here, found as a fixed point (whatever the
order of the classes): a model built in a loop of a script (a sweep over configurations) is no
layer, and neither is a class another module builds, a forward a layer inherits from a base, or
one built through a factory function. Asked by memlint.analysis.steps, for the `forward` of a
module class.
"""

from __future__ import annotations

from functools import cached_property
from typing import FrozenSet, Optional, Set

import libcst as cst

from memlint.analysis.receivers import Receivers
from memlint.analysis.scopes import Scopes
from memlint.analysis.tree import NEW_SCOPES, TreeIndex, dotted_name

_SEQUENCES = (cst.ListComp, cst.SetComp, cst.GeneratorExp)  # comprehensions of layers run in turn
_ADDS = frozenset({"append", "add_module", "insert"})  # a loop adding one more layer each iteration


class Layers:
    def __init__(self, tree: TreeIndex, scopes: Scopes, receivers: Receivers) -> None:
        self.tree = tree
        self.scopes = scopes
        self.receivers = receivers

    def is_layer(self, klass: cst.ClassDef) -> bool:
        """Whether this module builds `klass` once per layer of a model (see the module docstring)."""
        return id(klass) in self._layers

    @cached_property
    def _layers(self) -> FrozenSet[int]:
        classes = list(self.scopes.classes.values())
        found: Set[int] = set()
        changed = True
        while changed:
            changed = False
            for klass in classes:
                if id(klass) not in found and any(self._per_layer(call, found)
                                                  for call in self.scopes.constructions(klass)):
                    found.add(id(klass))
                    changed = True
        return frozenset(found)

    def _per_layer(self, construction: cst.Call, layers: Set[int]) -> bool:
        method = self._module_method(construction)
        if method is None:
            return False
        if self._one_per_iteration(construction):
            return True
        owner = self.tree.class_of(method)
        if id(owner) not in layers:
            return False
        return method.name.value == "__init__" or method.name.value in self._called_per_element

    def _module_method(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """The method of a module class of this module that `node` runs in."""
        func = self.tree.function_of(node)
        klass = self.tree.class_of(func) if func is not None else None
        return func if klass is not None and klass.name.value in self.receivers.module_classes else None

    def _one_per_iteration(self, construction: cst.Call) -> bool:
        """`construction` makes one more element of a sequence each time round: the element of
        a list, set or generator comprehension, or what a loop's body appends."""
        child: cst.CSTNode = construction
        for ancestor in self.tree.ancestors(construction):
            kind = type(ancestor)
            if kind in NEW_SCOPES:
                return False
            if kind in _SEQUENCES:
                return child is ancestor.elt  # type: ignore[attr-defined]
            if kind is cst.DictComp:
                return False  # alternatives by key
            if kind is cst.Arg and type(self.tree.parent(ancestor)) is cst.Call:
                call = self.tree.parent(ancestor)
                func = call.func  # type: ignore[union-attr]
                if type(func) is cst.Attribute and func.attr.value in _ADDS:
                    return bool(self.tree.loops_around(call))  # type: ignore[arg-type]
            child = ancestor
        return False

    @cached_property
    def _called_per_element(self) -> FrozenSet[str]:
        """The method names that methods of module classes call on each element a loop goes
        over (`for block in self.h: block.attn.build_kv_cache(...)`)."""
        found: Set[str] = set()
        for call in self.scopes.calls:
            func = call.func
            if type(func) is not cst.Attribute or self._module_method(call) is None:
                continue
            root = (dotted_name(func.value) or "").split(".")[0]
            if any(type(loop) is cst.For and root in _target_names(loop.target)  # type: ignore[attr-defined]
                   for loop in self.tree.loops_around(call)):
                found.add(func.attr.value)
        return frozenset(found)


def _target_names(target: cst.BaseExpression) -> FrozenSet[str]:
    """The names a `for` target binds (`i, block` for `for i, block in enumerate(self.h)`)."""
    if type(target) is cst.Name:
        return frozenset({target.value})  # type: ignore[attr-defined]
    if type(target) in (cst.Tuple, cst.List):
        return frozenset(name for element in target.elements for name in _target_names(element.value))  # type: ignore[attr-defined]
    return frozenset()
