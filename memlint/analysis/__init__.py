"""Static facts about one module, computed once and shared by every rule.

Rules ask; nothing here is computed until a rule asks for it, and nothing twice.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, Optional

import libcst as cst

from memlint.analysis.dataflow import block_flow
from memlint.analysis.loops import Loop, LoopFacts, ScopeUses
from memlint.analysis.torchnames import TorchNames
from memlint.analysis.training import TrainingFacts


class Facts:
    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self._torch: Optional[TorchNames] = None
        self._loops: Dict[int, LoopFacts] = {}
        self._scopes: Dict[int, ScopeUses] = {}
        self._training: Optional[TrainingFacts] = None

    @property
    def names(self) -> TorchNames:
        """Import-aware names: `facts.names.call_name(call) == "torch.randn"`."""
        if self._torch is None:
            self._torch = TorchNames(self.module)
        return self._torch

    @property
    def training(self) -> TrainingFacts:
        """The shape of the training step: backward, optimizer steps, forwards, grad mode."""
        if self._training is None:
            self._training = TrainingFacts(self.module, self.names)
        return self._training

    def loop(self, loop: Loop, scope: cst.CSTNode) -> LoopFacts:
        """Facts of `loop`, which runs in `scope` (its function, or the module)."""
        facts = self._loops.get(id(loop))
        if facts is None:
            facts = LoopFacts(loop, self.scope_uses(scope), self.names, self._resolve)
            self._loops[id(loop)] = facts
        return facts

    def _resolve(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        return self.training.resolve(call)

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
