"""Liveness: which reads can see the value one assignment binds to a name.

A rewrite that ends a value early (`del name` once it is no longer needed) is safe only when
no read that could see the value runs after that point. Asked as `facts.liveness`:

- `name_uses(scope)`: each load and store of a name in a scope's own body, in evaluation
  order, reads by nested functions flagged (memlint.analysis.dataflow), found once a scope;
- `reads_of(target, step, until)`: the reads that see the value an assignment binds to
  `target`, provided they all lie between the assignment and the position `until` inside
  `step` (the loop body or function that binds it); None when a read elsewhere may see it
  (after `until`, in the next iteration of a loop around it, after the loop), when `step`
  binds the name again before `until`, a nested function reads it, it is declared global, or `exec()` /
  `locals()` can run once it is bound. A read that a later binding surely precedes (an
  evaluation loop binding the name itself) does not see it;
- `surely_rebound(scope, name, start, read)`: that later binding.

Asked by: MEM207.
"""

from __future__ import annotations

from typing import AbstractSet, Callable, Dict, List, Optional, Set

import libcst as cst

from memlint.analysis.dataflow import DYNAMIC_FUNCTIONS, BlockFlow, block_flow
from memlint.analysis.scopes import Scopes
from memlint.analysis.tree import Scope, TreeIndex


class Liveness:
    """Reads of the values names are bound to, in one module (see the module docstring)."""

    def __init__(self, tree: TreeIndex, scopes: Scopes) -> None:
        self.tree = tree
        self.scopes = scopes
        self._uses: Dict[int, BlockFlow] = {}

    def name_uses(self, scope: Scope) -> BlockFlow:
        """The data flow of `scope`'s own body: each load and store of a name in evaluation order
        (nested functions' reads flagged `nested`), sinks such as `global`, `dynamic`."""
        found = self._uses.get(id(scope))
        if found is None:
            body = scope.body if type(scope) in (cst.FunctionDef, cst.Module) else scope
            found = block_flow(body)
            self._uses[id(scope)] = found
        return found

    def reads_of(self, target: cst.Name, step: cst.CSTNode, until: int,
                 holds_it: Optional[Callable[[cst.Name], bool]] = None) -> Optional[List[cst.Name]]:
        """The reads of the value the assignment holding `target` binds, all between it and the
        pre-order position `until` inside `step`; None when some read elsewhere may see it.
        `holds_it`: a binding of the same name that still holds the value (a view of it, `out =
        out.view(-1, v)`), whose reads count as the value's own."""
        tree = self.tree
        assign = next((a for a in tree.ancestors(target) if type(a) is cst.Assign), None)
        if assign is None:
            return None
        scope = tree.scope_of(assign)
        loops = tree.loops_around(assign)
        outermost = loops[-1] if loops else scope
        start = tree.span(assign)[1]
        flow = self.name_uses(scope)
        name = target.value
        if any(sink.kind == "global" and name in sink.sources for sink in flow.sinks):
            return None
        if flow.dynamic and any(tree.order(call) >= start or tree.contains(outermost, call) for call in flow.calls
                                if type(call.func) is cst.Name and call.func.value in DYNAMIC_FUNCTIONS):
            return None  # `exec(...)`, `locals()` run once the name is bound: they may read it
        reads: List[cst.Name] = []
        holders: Set[int] = set()
        for use in flow.uses:
            if use.name != name or use.node is target:
                continue
            if use.nested:
                return None
            if use.store:
                if holds_it is not None and start <= tree.order(use.node) < until and \
                        tree.contains(step, use.node) and holds_it(use.node):  # type: ignore[arg-type]
                    holders.add(id(next(a for a in tree.ancestors(use.node) if type(a) is cst.Assign)))
                    continue
                if tree.contains(step, use.node) and tree.order(use.node) < until:
                    return None  # bound again in the step, before `until`
                continue  # (bound again later, an evaluation after the backward: its reads must see that)
            if start <= tree.order(use.node) < until and tree.contains(step, use.node):
                reads.append(use.node)  # type: ignore[arg-type]
            elif not self.surely_rebound(scope, name, start, use.node, holders):
                return None  # after `until`, after the loop, in the next iteration
        return reads

    def surely_rebound(self, scope: Scope, name: str, start: int, read: cst.CSTNode,
                       holders: AbstractSet[int] = frozenset()) -> bool:
        """Whether `name` is surely bound again between the position `start` and `read`: by a
        later assignment whose block holds `read`, or a `with ... as` / `for` whose body does
        (not one of `holders`, assignments that bind it to what it held). A read above `start`
        comes in a later iteration of a loop around both: an assignment in that loop above the
        read counts too (build-nanogpt's validation `logits, loss = model(x, y)` before the
        training step's own, in the next step)."""
        tree = self.tree
        at = tree.order(read)
        if at < start:
            around = next((loop for loop in tree.loops_around(read) if tree.span(loop)[1] >= start), None)
            if around is None:
                return False
            start = tree.order(around)
        for bind in self.scopes.bindings(scope, name):
            if tree.order(bind.node) < start or id(bind.node) in holders:
                continue
            if bind.kind == "for" or bind.kind == "with":  # bound before the body runs
                if tree.contains(bind.node.body, read):  # type: ignore[attr-defined]
                    return True
                if bind.kind == "for":
                    continue  # after the loop: bound only if it ran at least once
            elif bind.kind != "assign":
                continue
            block = tree.dominating_block(bind.node)
            if tree.span(bind.node)[1] <= at and block is not None and tree.contains(block, read):
                return True
        return False
