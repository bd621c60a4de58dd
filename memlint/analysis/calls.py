"""Following calls: the calls a loop (or any node) makes, into the helpers of this module too.

Asked as `facts.calls`:

- `calls_in(node, follow=True)`: every call under `node` (nested functions not entered) as
  (call, call site in `node`); with `follow`, also the calls inside the functions and methods of
  this module those calls reach (`train_step(batch)`, `self.validate()`), up to 4 levels deep,
  not into helpers that run without grad (`@torch.no_grad()`): so a loop "has a backward" when
  a helper it calls does; with `recording`, neither through a call made without grad (in a
  `with torch.no_grad():`): what such a helper runs does not record, whatever its other callers do;
- `functions_reached(node)`: the functions of this module those calls reach.

What a single call calls is `facts.scopes.resolve(call)`. Asked by: roles (`backwards_in`,
`steps_in`, `forwards_in`), values (`hands_graph_away`), MEM203 and MEM301 (`calls_in`),
MEM301 and MEM401 (`functions_reached`).
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.regions import Regions
from memlint.analysis.scopes import Scopes
from memlint.analysis.tree import TreeIndex


class CallGraph:
    """The calls under a node of one module, helpers followed (see the module docstring)."""

    MAX_FOLLOW_DEPTH = 4

    def __init__(self, tree: TreeIndex, scopes: Scopes, regions: Regions) -> None:
        self.tree = tree
        self.scopes = scopes
        self.regions = regions
        self._calls_in: Dict[Tuple[int, bool, bool, bool], List[Tuple[cst.Call, cst.Call]]] = {}
        self._direct: Dict[int, List[cst.Call]] = {}

    def calls_in(self, node: cst.CSTNode, follow: bool = True, recording: bool = False,
                 through_no_grad: bool = False) -> List[Tuple[cst.Call, cst.Call]]:
        """Every call under `node` (nested functions not entered) as (call, call site in `node`):
        with `follow`, also the calls inside functions of this module that those calls reach
        (not those decorated to run without grad, unless `through_no_grad`: a sampler's
        `@torch.no_grad()` step still runs the model); with `recording`, not through a call made
        with grad off (`with torch.no_grad(): f(x)`)."""
        key = (id(node), follow, recording, through_no_grad)
        found = self._calls_in.get(key)
        if found is None:
            found = list(self._calls_in_uncached(node, follow, recording, through_no_grad))
            self._calls_in[key] = found
        return found

    def _calls_in_uncached(self, node: cst.CSTNode, follow: bool, recording: bool,
                           through_no_grad: bool) -> Iterator[Tuple[cst.Call, cst.Call]]:
        seen: Set[int] = set()
        pending: List[Tuple[cst.CSTNode, Optional[cst.Call], int]] = [(node, None, 0)]
        while pending:
            root, site, depth = pending.pop()
            for call in self._direct_calls(root):
                here = site if site is not None else call
                yield call, here
                if follow and depth < self.MAX_FOLLOW_DEPTH:
                    target = self.scopes.resolve(call)
                    if target is not None and id(target) not in seen and not self.tree.contains(target, node):
                        seen.add(id(target))
                        if (through_no_grad or self.regions.grad_enabled_by_decorator(target) is not False) and not (
                                recording and self._grad_off_at(call)):
                            pending.append((target.body, here, depth + 1))

    def _grad_off_at(self, call: cst.Call) -> bool:
        """`call` is made in a `with` that turns grad off (`torch.no_grad()`, `inference_mode()`)."""
        region = self.regions.region_at(call)
        return region is not None and region.grad_enabled is False

    def _direct_calls(self, node: cst.CSTNode) -> List[cst.Call]:
        """The calls under `node`, in source order, not inside nested functions or classes."""
        found = self._direct.get(id(node))
        if found is None:
            found = self.tree.scope_nodes(node, cst.Call)  # type: ignore[assignment]
            self._direct[id(node)] = found
        return found

    def functions_reached(self, node: cst.CSTNode) -> List[cst.FunctionDef]:
        """Functions of this module that calls under `node` reach (helpers followed)."""
        found: Dict[int, cst.FunctionDef] = {}
        for call, _ in self.calls_in(node):
            target = self.scopes.resolve(call)
            if target is not None and not self.tree.contains(target, node):
                found.setdefault(id(target), target)
        return list(found.values())
