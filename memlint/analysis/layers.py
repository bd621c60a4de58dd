"""Layers: the module classes a model of this module builds once per layer.

A model's `forward` runs once per step; the forward of a class the model builds once per layer
(`nn.ModuleList(Block(config) for _ in range(n_layer))`) runs once per layer, on every step. A
host-device wait there (a KV cache's `input_pos.max().item()`) is paid once per layer per step
or generated token, and so is anything its forward calls. A module class is a layer where this
module builds it

- in a loop or comprehension inside a method of a module class: the layers a model builds;
- in `__init__` of a layer (`self.attn = CausalSelfAttention(config)` in a block);
- in a method of a module class that a method of a module class calls, by its name, in a loop
  or comprehension (`for block in self.h: block.attn.kv_cache = block.attn.build_kv_cache(...)`).

Only this module's classes and their constructions here: a model built in a loop of a script
(a sweep over configurations) is no layer, and neither is a class another module builds. Asked
by memlint.analysis.steps, for the `forward` of a module class.
"""

from __future__ import annotations

from functools import cached_property
from typing import Dict, FrozenSet, List, Optional

import libcst as cst

from memlint.analysis.receivers import Receivers
from memlint.analysis.scopes import Scopes
from memlint.analysis.tree import NEW_SCOPES, TreeIndex

_REPEATING = (cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


class Layers:
    def __init__(self, tree: TreeIndex, scopes: Scopes, receivers: Receivers) -> None:
        self.tree = tree
        self.scopes = scopes
        self.receivers = receivers
        self._layers: Dict[int, bool] = {}

    def is_layer(self, klass: cst.ClassDef) -> bool:
        """Whether this module builds `klass` once per layer of a model (see the module docstring)."""
        key = id(klass)
        if key not in self._layers:
            self._layers[key] = False  # a class built in its own `__init__` does not decide
            self._layers[key] = any(self._per_layer(call) for call in self.scopes.constructions(klass))
        return self._layers[key]

    def _per_layer(self, construction: cst.Call) -> bool:
        method = self._module_method(construction)
        if method is None:
            return False
        if self._repeated(construction):
            return True
        if method.name.value == "__init__":
            return self.is_layer(self.tree.class_of(method))  # type: ignore[arg-type]
        return method.name.value in self._called_repeatedly

    def _module_method(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """The method of a module class of this module that `node` runs in."""
        func = self.tree.function_of(node)
        klass = self.tree.class_of(func) if func is not None else None
        return func if klass is not None and klass.name.value in self.receivers.module_classes else None

    def _repeated(self, node: cst.CSTNode) -> bool:
        """`node` is in a loop or a comprehension of its function."""
        for ancestor in self.tree.ancestors(node):
            if type(ancestor) in NEW_SCOPES:
                return False
            if isinstance(ancestor, _REPEATING):
                return True
        return False

    @cached_property
    def _called_repeatedly(self) -> FrozenSet[str]:
        """The method names that methods of module classes call in a loop or comprehension
        (`block.attn.build_kv_cache(...)` for each block)."""
        found: List[str] = [call.func.attr.value for call in self.scopes.calls  # type: ignore[attr-defined]
                            if type(call.func) is cst.Attribute and self._module_method(call) is not None
                            and self._repeated(call)]
        return frozenset(found)
