"""Static facts about one module, computed once and shared by every rule.

Rules ask; nothing here is computed until a rule asks for it, and nothing twice.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, FrozenSet, List, Optional

import libcst as cst

from memlint.analysis.dataflow import block_flow
from memlint.analysis.loops import Loop, LoopFacts, ScopeUses
from memlint.analysis.torchnames import Reference, TorchNames, references
from memlint.analysis.calls import CallGraph
from memlint.analysis.regions import Regions
from memlint.analysis.scopes import Scopes
from memlint.analysis.training import TrainingFacts
from memlint.analysis.tree import TreeIndex, dotted_name, index, walk


class Facts:
    def __init__(self, module: cst.Module, tree: Optional[TreeIndex] = None) -> None:
        self.module = module
        self._tree = tree
        self._torch: Optional[TorchNames] = None
        self._loops: Dict[int, LoopFacts] = {}
        self._scopes: Dict[int, ScopeUses] = {}
        self._references: Optional[Dict[str, List[Reference]]] = None
        self._scopes_index: Optional[Scopes] = None
        self._regions: Optional[Regions] = None
        self._calls: Optional[CallGraph] = None
        self._training: Optional[TrainingFacts] = None
        self._identifiers: Optional[FrozenSet[str]] = None

    @property
    def names(self) -> TorchNames:
        """Import-aware names: `facts.names.call_name(call) == "torch.randn"`."""
        if self._torch is None:
            self._torch = TorchNames(self.module, self._tree)
        return self._torch

    @property
    def tree(self) -> TreeIndex:
        """Every node in source order, with depths and parents (one walk, shared)."""
        if self._tree is None:
            self._tree = index(self.module)
        return self._tree

    @property
    def scopes(self) -> Scopes:
        """Names bound in each scope, what a call calls, the module's functions, classes and calls."""
        if self._scopes_index is None:
            self._scopes_index = Scopes(self.tree)
        return self._scopes_index

    @property
    def regions(self) -> Regions:
        """Grad-mode, autocast and accumulate regions; grad mode at a node."""
        if self._regions is None:
            self._regions = Regions(self.names, self.tree, self.scopes)
        return self._regions

    @property
    def calls(self) -> CallGraph:
        """The calls under a node, into the module's helpers too."""
        if self._calls is None:
            self._calls = CallGraph(self.tree, self.scopes, self.regions)
        return self._calls

    @property
    def training(self) -> TrainingFacts:
        """The shape of the training step: backward, optimizer steps, forwards, grad mode."""
        if self._training is None:
            self._training = TrainingFacts(self.module, self.names, self.tree, self.scopes, self.regions,
                                           self.calls)
        return self._training

    def loop(self, loop: Loop, scope: cst.CSTNode) -> LoopFacts:
        """Facts of `loop`, which runs in `scope` (its function, or the module)."""
        facts = self._loops.get(id(loop))
        if facts is None:
            facts = LoopFacts(loop, self.scope_uses(scope), self.names, self._resolve)
            self._loops[id(loop)] = facts
        return facts

    def _resolve(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        return self.scopes.resolve(call)

    def scope_uses(self, scope: cst.CSTNode) -> ScopeUses:
        """How the names of a function (or the module) are read, closures included."""
        uses = self._scopes.get(id(scope))
        if uses is None:
            body = scope.body if isinstance(scope, (cst.FunctionDef, cst.Module)) else scope
            flow = block_flow(body)
            loads = [u for u in flow.uses if not u.store]
            uses = ScopeUses(
                loads=Counter(u.name for u in loads),
                alias_loads=Counter(u.name for u in loads if not u.scalar),
                declared_global=frozenset(
                    name for sink in flow.sinks if sink.kind == "global" for name in sink.sources
                ),
            )
            self._scopes[id(scope)] = uses
        return uses

    def references(self, qualified: str) -> List[Reference]:
        """Every place the module names the imported API `qualified` (e.g. `torch.cuda.amp.autocast`)."""
        if self._references is None:
            self._references = references(self.module, self.names)
        return self._references.get(qualified, [])

    def references_through(self, local: str) -> List[Reference]:
        """Every use of the imported name `local` (`amp` in `amp.autocast()`), whatever it resolves to."""
        if self._references is None:
            self._references = references(self.module, self.names)
        return [ref for refs in self._references.values() for ref in refs
                if (dotted_name(ref.node) or "").split(".")[0] == local]

    @property
    def identifiers(self) -> FrozenSet[str]:
        """Every name spelled anywhere in the module (attribute names too): a new name must avoid them."""
        if self._identifiers is None:
            self._identifiers = frozenset(n.value for n in walk(self.module) if isinstance(n, cst.Name))
        return self._identifiers
