"""Layers: the module classes a model of this module builds once per layer.

A model's `forward` runs once per step; the forward of a class the model builds once per layer
(`nn.ModuleList(Block(config) for _ in range(n_layer))`) runs once per layer, on every step. A
host-device wait there (a KV cache's `input_pos.max().item()`) is paid once per layer per step
or generated token. A module class is a layer where, in a method of a module class, this module
builds one

- per element of a list, set or generator comprehension over a count (`[Block(c) for _ in
  range(n)]`), or per iteration of a loop over a count that appends it (`layers.append(Block(c))`,
  `layer = Block(c); self.add_module(name, layer)`): a sequence of layers, each run in turn. Not
  alternatives, one of which runs per step: a dict (`nn.ModuleDict({split: Accuracy() for split
  in splits})`) or a list over named things (`[Head(c) for c in classes]`); nor one built in a
  loop's iterable (evaluated once), nor one a loop binds to a name or an attribute it keeps (the
  last one is kept);
- in a loop over a module's elements, as an attribute of the element (`for layer in
  self.layers: layer.attention.kv_cache = KVCache(...)`, gpt-fast's);
- in `__init__` of a layer (`self.attn = CausalSelfAttention(config)` in a block);
- in a method of a layer that a method of a module class calls on each element of a loop
  (`for block in self.h: block.attn.kv_cache = block.attn.build_kv_cache(...)`).

A module class is also run once per time step where a module class of this module builds it
in `__init__` as an attribute (`self.decoder = Decoder(...)`) and its `forward` calls that
attribute in a loop over a count or a `while` loop (a Tacotron's decoder, one call per output
frame: `for t in range(0, steps, self.r): ... self.decoder(...)`); so is what such a class
builds in its own `__init__`. `time_step_loop(klass)` gives that loop, for the message.

Only this module's classes and their constructions here, found as a fixed point (whatever the
order of the classes): a model built in a loop of a script (a sweep over configurations) is no
layer, and neither is a class another module builds, a forward a layer inherits from a base, or
one built through a factory function. Asked by memlint.analysis.steps, for the `forward` of a
module class.
"""

from __future__ import annotations

from functools import cached_property
from typing import Dict, FrozenSet, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.dataflow import target_names
from memlint.analysis.loops import range_span
from memlint.analysis.receivers import Receivers
from memlint.analysis.scopes import Scopes
from memlint.analysis.tree import NEW_SCOPES, TreeIndex, dotted_name, own_method, walk

_SEQUENCES = (cst.ListComp, cst.SetComp, cst.GeneratorExp)  # comprehensions of layers run in turn
_ADDS = frozenset({"append", "add_module", "insert", "extend"})  # a loop adding one more layer each iteration


class Layers:
    def __init__(self, tree: TreeIndex, scopes: Scopes, receivers: Receivers) -> None:
        self.tree = tree
        self.scopes = scopes
        self.receivers = receivers

    def is_layer(self, klass: cst.ClassDef) -> bool:
        """Whether this module builds `klass` once per layer of a model, or runs it once per
        time step of another module's `forward` (see the module docstring)."""
        return id(klass) in self._layers

    def time_step_loop(self, klass: cst.ClassDef) -> Optional[cst.CSTNode]:
        """The loop of another module's `forward` that runs `klass` (or the module that builds
        it) once per time step; None for a layer or a class that is neither."""
        return self._layers.get(id(klass))

    @cached_property
    def _layers(self) -> Dict[int, Optional[cst.CSTNode]]:
        """id(class) -> the time step loop that runs it, or None for a layer."""
        classes = list(self.scopes.classes.values())
        found: Dict[int, Optional[cst.CSTNode]] = {}
        changed = True
        while changed:
            changed = False
            for klass in classes:
                if id(klass) in found:
                    continue
                for call in self.scopes.constructions(klass):
                    placed, loop = self._per_layer(call, found)
                    if placed:
                        found[id(klass)] = loop
                        changed = True
                        break
        return found

    def _per_layer(self, construction: cst.Call,
                   layers: Dict[int, Optional[cst.CSTNode]]) -> Tuple[bool, Optional[cst.CSTNode]]:
        """Whether `construction` makes a layer (or a module run per time step), and the time
        step loop that runs it."""
        method = self._module_method(construction)
        if method is None:
            return False, None
        if self._one_per_iteration(construction):
            return True, None
        loop = self._called_per_time_step(construction, method)
        if loop is not None:
            return True, loop
        owner = self.tree.class_of(method)
        if id(owner) not in layers:
            return False, None
        placed = method.name.value == "__init__" or method.name.value in self._called_per_element
        return placed, layers[id(owner)] if placed else None

    def _called_per_time_step(self, construction: cst.Call, method: cst.FunctionDef) -> Optional[cst.CSTNode]:
        """`self.decoder = Decoder(...)` in `__init__`, and `self.decoder(...)` in a loop over a
        count or a `while` loop of the same class's `forward`: that loop."""
        assign = self.tree.parent(construction)
        if method.name.value != "__init__" or type(assign) is not cst.Assign or \
                len(assign.targets) != 1:  # type: ignore[attr-defined]
            return None
        attribute = dotted_name(assign.targets[0].target)  # type: ignore[attr-defined]
        if attribute is None or not attribute.startswith("self.") or attribute.count(".") != 1:
            return None
        owner = self.tree.class_of(method)
        forward = own_method(owner, "forward")  # type: ignore[arg-type]
        if forward is None:
            return None
        for call in self.scopes.calls_of(forward):
            if dotted_name(call.func) != attribute:
                continue
            loops = self.tree.loops_around(call)
            if loops and (type(loops[0]) is cst.While or _counts_steps(loops[0].iter)):  # type: ignore[attr-defined]
                return loops[0]
        return None

    def _module_method(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """The method of a module class of this module that `node` runs in."""
        func = self.tree.function_of(node)
        klass = self.tree.class_of(func) if func is not None else None
        return func if klass is not None and klass.name.value in self.receivers.module_classes else None

    def _one_per_iteration(self, construction: cst.Call) -> bool:
        """`construction` makes one more element of a sequence each time round a count of layers
        (`range(n_layer)`): the element of a list, set or generator comprehension, or what a
        loop's body appends, itself or by the name it binds (`layer = Block(); layers.append(layer)`);
        or, in a loop over a module's elements, an attribute of the element (`layer.attention.kv_cache
        = KVCache(...)`, gpt-fast's)."""
        child: cst.CSTNode = construction
        for ancestor in self.tree.ancestors(construction):
            kind = type(ancestor)
            if kind in NEW_SCOPES or kind is cst.DictComp:
                return False  # (a dict: alternatives by key)
            if kind in _SEQUENCES:
                return child is ancestor.elt and _counts_layers(ancestor.for_in.iter)  # type: ignore[attr-defined]
            if kind is cst.Arg and _adds(self.tree.parent(ancestor)):
                return self._in_a_count(ancestor)
            if kind is cst.Assign and ancestor.value is child:  # type: ignore[attr-defined]
                return self._bound_per_iteration(ancestor)  # type: ignore[arg-type]
            child = ancestor
        return False

    def _in_a_count(self, node: cst.CSTNode) -> bool:
        loops = self.tree.loops_around(node)
        return bool(loops) and type(loops[0]) is cst.For and _counts_layers(loops[0].iter)  # type: ignore[attr-defined]

    def _bound_per_iteration(self, assign: cst.Assign) -> bool:
        """`layer = Block(...)` then `self.layers.append(layer)` in a loop over a count of layers;
        `block.attn.kv_cache = KVCache(...)` in a loop over the blocks."""
        loops = self.tree.loops_around(assign)
        if not loops or type(loops[0]) is not cst.For or len(assign.targets) != 1:
            return False
        loop, target = loops[0], assign.targets[0].target
        if type(target) is cst.Attribute:
            return (dotted_name(target) or "").split(".")[0] in target_names(loop.target)  # type: ignore[attr-defined]
        if type(target) is not cst.Name or not _counts_layers(loop.iter):  # type: ignore[attr-defined]
            return False
        return any(type(node) is cst.Call and _adds(node) and any(
            type(arg.value) is cst.Name and arg.value.value == target.value for arg in node.args)  # type: ignore[attr-defined]
            for node in walk(loop.body))  # type: ignore[attr-defined]

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
            if any(type(loop) is cst.For and root in target_names(loop.target)  # type: ignore[attr-defined]
                   for loop in self.tree.loops_around(call)):
                found.add(func.attr.value)
        return frozenset(found)


def _adds(node: Optional[cst.CSTNode]) -> bool:
    """`layers.append(...)`, `self.add_module(name, ...)`, `blocks.extend([...])`, `insert`."""
    return type(node) is cst.Call and type(node.func) is cst.Attribute and \
        node.func.attr.value in _ADDS  # type: ignore[attr-defined]


def _counts_steps(iterable: cst.BaseExpression) -> bool:
    """`range(steps)`, `range(0, steps, self.r)`: a count not spelled as a number (`range(3)`
    is a few passes, not time steps)."""
    return type(iterable) is cst.Call and type(iterable.func) is cst.Name and \
        iterable.func.value == "range" and range_span(iterable) is None  # type: ignore[attr-defined]


def _counts_layers(iterable: cst.BaseExpression) -> bool:
    """`range(n_layer)`, also through `enumerate`, `zip` or `reversed`: a count, where a loop
    over named things (`for split in splits`, `for c in classes`) builds alternatives."""
    if type(iterable) is not cst.Call or type(iterable.func) is not cst.Name:  # type: ignore[attr-defined]
        return False
    name = iterable.func.value  # type: ignore[attr-defined]
    if name == "range":
        return True
    return name in ("enumerate", "zip", "reversed") and any(_counts_layers(arg.value) for arg in iterable.args)  # type: ignore[attr-defined]
