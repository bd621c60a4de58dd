"""Loop facts: names bound per iteration, loop invariance, and escape from an iteration.

Both questions decide whether rewriting code inside a loop keeps its behaviour:

- an expression is *invariant* when nothing it reads is rebound or mutated by the loop and it
  calls nothing but pure helpers (`len`, `x.size(0)`, `torch.device`);
- a value bound in an iteration *escapes* it when anything derived from it (views, results,
  closures) is still reachable once the next iteration rebinds the name: appended or stored,
  returned or yielded, captured, read before it is rebound (carried over), read outside the
  loop, passed to a call that may keep it, or to a function of this module that keeps it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Counter as CounterType
from typing import TYPE_CHECKING, Callable, FrozenSet, Optional, Set, Union

import libcst as cst

from memlint.analysis.dataflow import (SIZE_METHODS, BlockFlow, Sink, block_flow, derived, keeps_parameters,
                                       sources_of, target_names)
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.tree import children

if TYPE_CHECKING:
    from memlint.analysis.scopes import Scopes

Loop = Union[cst.For, cst.While]

_PURE_BUILTINS = frozenset({"len", "int", "float", "bool", "min", "max", "abs", "round", "tuple"})
_PURE_TORCH = frozenset({"torch.device", "torch.Size"})
# Calls made for their effect whose arguments are not kept.
_HARMLESS_CALLS = frozenset({"print"})


@dataclass(frozen=True)
class ScopeUses:
    """How a function's (or the module's) names are read, nested functions included."""

    loads: CounterType[str]
    alias_loads: CounterType[str]  # reads that take more than a plain value (not `x.item()`)
    declared_global: FrozenSet[str]  # `global` / `nonlocal` names: anyone may read them


class LoopFacts:
    def __init__(self, loop: Loop, scope: ScopeUses, names: TorchNames,
                 resolve: Callable[[cst.Call], Optional[cst.FunctionDef]]) -> None:
        self.loop = loop
        self._names = names
        self._resolve = resolve  # the function of this module a call calls, if known
        self._scope = scope
        self.flow: BlockFlow = block_flow(loop.body)
        bound = {use.name for use in self.flow.uses if use.store and not use.nested}
        if type(loop) is cst.For:
            bound |= target_names(loop.target)
        self.bound: FrozenSet[str] = frozenset(bound)
        self._mutated: FrozenSet[str] = frozenset(
            {name for flow in self.flow.flows for name in flow.containers} | self.flow.mutated
        )
        self._body_loads: CounterType[str] = Counter(
            use.name for use in self.flow.uses if not use.store
        )
        self._body_alias_loads: CounterType[str] = Counter(
            use.name for use in self.flow.uses if not use.store and not use.scalar
        )

    def bindings_of(self, name: str) -> int:
        """How many places in the loop (its target included) bind `name`."""
        count = sum(1 for use in self.flow.uses if use.store and use.name == name)
        if type(self.loop) is cst.For and name in target_names(self.loop.target):
            count += 1
        return count

    def changes(self, name: str) -> bool:
        """Whether the loop rebinds `name` or changes what it holds in place."""
        return name in self.bound or name in self._mutated

    def changes_in_place(self, name: str) -> bool:
        """Whether the loop writes into what `name` holds: an in-place method (`x.add_()`,
        `xs.append()`), a store into it (`x[i] = v`), or an augmented assignment (`x += v`,
        in place for a tensor)."""
        return name in self._mutated or any(
            sink.kind == "accumulated" and name in sink.receiver for sink in self.flow.sinks)

    # -- invariance --------------------------------------------------------------------------
    def is_invariant(self, expr: cst.CSTNode) -> bool:
        stack = [expr]
        while stack:
            node = stack.pop()
            if type(node) is cst.Name:
                if node.value in self.bound or node.value in self._mutated:
                    return False
            elif type(node) is cst.Attribute:
                stack.append(node.value)
            elif type(node) is cst.Arg:
                stack.append(node.value)
            elif type(node) is cst.Call:
                if not self._is_pure_call(node):
                    return False
                stack.extend(children(node))
            elif type(node) in (cst.Lambda, cst.NamedExpr, cst.Yield, cst.Await, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp):
                return False
            else:
                stack.extend(children(node))
        return True

    def _is_pure_call(self, call: cst.Call) -> bool:
        func = call.func
        if type(func) is cst.Name and func.value in _PURE_BUILTINS:
            return func.value not in self.bound
        if type(func) is cst.Attribute and func.attr.value in SIZE_METHODS:
            return True
        return self._names.qualified_name(func) in _PURE_TORCH

    # -- escape ------------------------------------------------------------------------------
    def derived_from(self, name: str) -> Set[str]:
        """`name` and every name bound in the loop from a value computed from it."""
        return derived(self.flow.flows, {name})

    def escapes(self, name: str) -> bool:
        """Whether what `name` holds in one iteration can still be reached after the next rebinds it."""
        if self.flow.dynamic:
            return True
        tainted = self.derived_from(name)
        if any(self._sink_keeps(sink, tainted) for sink in self.flow.sinks):
            return True
        if any(self._callee_keeps(call, tainted) for call in self.flow.calls):
            return True
        if any(use.nested and use.name in tainted for use in self.flow.uses):
            return True  # captured by a nested function, lambda or class
        if self._carried(name, tainted):
            return True
        # Read outside the loop body (its header, its else, anywhere else in the scope): the name
        # itself must not be (after zero iterations it would be the new buffer); what was derived
        # from it may be, for a plain value (`print(loss.item())` after the loop).
        if self._scope.loads[name] > self._body_loads[name] or tainted & self._scope.declared_global:
            return True
        return any(self._scope.alias_loads[t] > self._body_alias_loads[t] for t in tainted)

    def _sink_keeps(self, sink: Sink, tainted: Set[str]) -> bool:
        if not sink.sources & tainted or sink.receiver & tainted:
            return False
        if sink.kind == "called" and type(sink.node) is cst.Call:
            func = sink.node.func
            if type(func) is cst.Name and func.value in _HARMLESS_CALLS:
                return False
            qualified = self._names.qualified_name(func)
            if qualified is not None and qualified.split(".")[0] == "torch":
                return False
        return True

    def _callee_keeps(self, call: cst.Call, tainted: Set[str]) -> bool:
        """Passed to a function of this module that keeps its arguments (`kept.append(x)` inside)."""
        if not any(sources_of(arg.value) & tainted for arg in call.args):
            return False
        func = self._resolve(call)
        return func is not None and keeps_parameters(func)

    def _carried(self, name: str, tainted: Set[str]) -> bool:
        """A derived name read before it is bound in the iteration reads the previous one (not
        the loop's own target, which the loop binds afresh before the body runs)."""
        seen: Set[str] = target_names(self.loop.target) if type(self.loop) is cst.For else set()
        conditionally_bound: Set[str] = set()
        for use in self.flow.uses:
            if use.nested or use.name not in tainted:
                continue
            if use.name not in seen:
                seen.add(use.name)
                if not use.store:
                    return True
            if use.store and use.conditional and use.name != name:
                conditionally_bound.add(use.name)
        # `if c: y = x` then `use(y)`: y may still be the previous iteration's alias
        return any(
            not use.store and use.name in conditionally_bound for use in self.flow.uses
        )


# A `range` the code spells shorter than this runs a few times: a handful of examples or
# settings, not many steps.
FEW_ITERATIONS = 16


def range_span(call: cst.Call) -> Optional[int]:
    """How many times `range(...)` runs where its bounds are integer literals (`range(10)`,
    `range(2, 8)`); None otherwise."""
    bounds = [arg.value for arg in call.args]
    if not bounds or any(type(b) is not cst.Integer for b in bounds):
        return None
    values = [int(b.value, 0) for b in bounds]  # type: ignore[attr-defined]
    return values[0] if len(values) == 1 else values[1] - values[0]


def _spelled(sequence: cst.BaseExpression) -> bool:
    """A tuple or list whose items the code writes out one by one (not `[*loader]`)."""
    return not any(type(e) is cst.StarredElement for e in sequence.elements)  # type: ignore[attr-defined]


def few_literal(loop: cst.CSTNode, scopes: "Scopes") -> bool:
    """`for i in range(10)`, `for name in ("a", "b")`: a handful of iterations the code spells,
    a demo's few examples or a search over a few settings, not a pass over a data set; also
    through a name bound only to such a range (`time_stamp_range = range(90, 100)`, then `for t
    in time_stamp_range`), or bound once, in the loop's own function, to a short sequence it
    spells (`candidate = [1, 2, 3]`: not a module's list that functions fill, nor one that
    starts empty)."""
    iterable = loop.iter if type(loop) is cst.For else None  # type: ignore[attr-defined]
    if type(iterable) is cst.Name:
        binds = scopes.in_effect(iterable.value, iterable)  # type: ignore[attr-defined]
        if len(binds) != 1 or binds[0].kind != "assign" or not binds[0].whole:
            return False
        iterable = binds[0].value
        if type(iterable) in (cst.Tuple, cst.List):
            return 0 < len(iterable.elements) < FEW_ITERATIONS and _spelled(iterable) and \
                type(scopes.tree.scope_of(binds[0].node)) is cst.FunctionDef  # type: ignore[attr-defined]
    if type(iterable) in (cst.Tuple, cst.List):
        return _spelled(iterable)  # type: ignore[arg-type]
    if type(iterable) is not cst.Call or type(iterable.func) is not cst.Name or iterable.func.value != "range":  # type: ignore[attr-defined]
        return False
    span = range_span(iterable)  # type: ignore[arg-type]
    return span is not None and span < FEW_ITERATIONS


# The parts of a model held as a collection: `self.unet.encoder_hid_proj.image_projection_layers`.
_MODEL_PARTS = re.compile(r"(^|_)(layers|blocks|heads|experts|adapters|stages|encoders|decoders)$")


def over_model_parts(loop: cst.CSTNode) -> bool:
    """A `for` over a collection of a model's parts (an attribute named like its layers,
    directly or through `zip`/`enumerate`): it runs once per part, a fixed handful of times
    whatever the data, so what it keeps per iteration does not grow with the run."""
    if type(loop) is not cst.For:
        return False
    iterables = [loop.iter]  # type: ignore[attr-defined]
    if type(loop.iter) is cst.Call and type(loop.iter.func) is cst.Name and \
            loop.iter.func.value in ("zip", "enumerate"):  # type: ignore[attr-defined]
        iterables = [arg.value for arg in loop.iter.args]  # type: ignore[attr-defined]
    return any(type(item) is cst.Attribute and bool(_MODEL_PARTS.search(item.attr.value))  # type: ignore[attr-defined]
               for item in iterables)


def one_per_model_part(name: str, at: cst.CSTNode, scopes: "Scopes") -> bool:
    """A list made empty and filled only by loops over a model's parts (`for tokenizer,
    text_encoder in zip(self.tokenizers, self.text_encoders): embs.append(...)`): it holds one
    element per part, so a loop over `range(1, len(embs))` runs a fixed handful of times."""
    binds = scopes.bindings_seen(name, at)
    fills = [bind for bind in binds if bind.kind == "append"]
    if any(type(fill.node) is not cst.Call or type(fill.node.func) is not cst.Attribute or  # type: ignore[attr-defined]
           fill.node.func.attr.value != "append" for fill in fills):  # type: ignore[attr-defined]
        return False  # (`extend` adds any number a part)
    made = [bind.node for bind in binds if bind.kind != "append"]
    if not fills or not all(type(node) is cst.Assign and type(node.value) is cst.List and not node.value.elements  # type: ignore[attr-defined]
                            for node in made):
        return False
    tree = scopes.tree
    for fill in fills:  # the loops that run between making the list and filling it
        loops = [loop for loop in tree.loops_around(fill.node) if not any(tree.contains(loop, node) for node in made)]
        if not loops or not all(map(over_model_parts, loops)):
            return False
    return True
