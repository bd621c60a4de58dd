"""Which torch API a name or call means, from the module's own imports.

`import torch as t` makes `t.randn` mean `torch.randn`; `from torch import randn as rn` makes
`rn` mean it too; `import torch.nn as nn` makes `nn.Linear` mean `torch.nn.Linear`.  One pass
over the statements (never into expressions) collects the imports: LibCST's
QualifiedNameProvider gives the same answers for ten times the cost of the parse.

A local name imported twice with different meanings, or rebound at module level after its
import, is dropped: when unsure, no API is named and no rule fires.
"""

from __future__ import annotations

from typing import Dict, Iterator, Optional, Set

import libcst as cst

from memlint.analysis.tree import children, dotted_name

def _statements(node: cst.CSTNode) -> Iterator[cst.BaseStatement]:
    """Every statement under `node`, nested blocks included (imports inside functions count)."""
    for child in children(node):
        if isinstance(child, cst.BaseStatement):
            yield child
        if not isinstance(child, (cst.BaseExpression, cst.SimpleStatementLine)):
            yield from _statements(child)


class TorchNames:
    """Resolves names and attribute chains to fully qualified import names."""

    def __init__(self, module: cst.Module) -> None:
        aliases: Dict[str, str] = {}
        ambiguous: Set[str] = set()
        rebound: Set[str] = set()

        def bind(local: str, qualified: str) -> None:
            if aliases.get(local, qualified) != qualified:
                ambiguous.add(local)
            aliases[local] = qualified

        for stmt in _statements(module):
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Import):
                        for alias in small.names:
                            full = dotted_name(alias.name)
                            if full is None:
                                continue
                            if alias.asname is not None:
                                bind(alias.asname.name.value, full)  # type: ignore[union-attr]
                            else:
                                top = full.split(".")[0]
                                bind(top, top)
                    elif isinstance(small, cst.ImportFrom):
                        if small.relative or small.module is None:
                            continue
                        base = dotted_name(small.module)
                        if base is None or isinstance(small.names, cst.ImportStar):
                            continue
                        for alias in small.names:
                            name = dotted_name(alias.name)
                            if name is None:
                                continue
                            local = alias.asname.name.value if alias.asname else name  # type: ignore[union-attr]
                            bind(local, f"{base}.{name}")
        for stmt in module.body:  # module-level rebinding shadows an import for the whole file
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                rebound.add(stmt.name.value)
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    targets = ()
                    if isinstance(small, cst.Assign):
                        targets = tuple(t.target for t in small.targets)
                    elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
                        targets = (small.target,)
                    for target in targets:
                        if isinstance(target, cst.Name):
                            rebound.add(target.value)
        self._aliases = {
            local: full
            for local, full in aliases.items()
            if local not in ambiguous and local not in rebound
        }

    def qualified_name(self, expr: cst.BaseExpression) -> Optional[str]:
        """`torch.randn` for `t.randn` under `import torch as t`; None when not imported."""
        dotted = dotted_name(expr)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        full = self._aliases.get(head)
        if full is None:
            return None
        return f"{full}.{rest}" if rest else full

    def call_name(self, node: cst.CSTNode) -> Optional[str]:
        """The qualified name of the function a Call calls, or None."""
        if isinstance(node, cst.Call):
            return self.qualified_name(node.func)
        return None

    def local_name_for(self, qualified: str) -> Optional[str]:
        """How this module can spell `qualified` (e.g. `t.empty` for `torch.empty`), or None."""
        best: Optional[str] = None
        for local, full in self._aliases.items():
            if qualified == full:
                return local
            if qualified.startswith(full + "."):
                candidate = local + qualified[len(full):]
                if best is None or len(candidate) < len(best):
                    best = candidate
        return best

    @property
    def mentions_torch(self) -> bool:
        return any(full == "torch" or full.startswith("torch.") for full in self._aliases.values())
