"""Which torch API a name or call means, from the module's own imports.

`import torch as t` makes `t.randn` mean `torch.randn`; `from torch import randn as rn` makes
`rn` mean it too; `import torch.nn as nn` makes `nn.Linear` mean `torch.nn.Linear`.  One pass
over the statements (never into expressions) collects the imports: LibCST's
QualifiedNameProvider gives the same answers for ten times the cost of the parse.

A local name imported twice with different meanings, or rebound at module level after its
import, is dropped: when unsure, no API is named and no rule fires.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.tree import TreeIndex, dotted_name, walk

def _imports(module: cst.Module, tree: Optional[TreeIndex]) -> Iterator[cst.CSTNode]:
    """Every import statement, nested blocks included (imports inside functions count)."""
    if tree is not None:
        return iter(tree.nodes_of(cst.Import, cst.ImportFrom))
    return (node for node in walk(module) if type(node) in (cst.Import, cst.ImportFrom))


class TorchNames:
    """Resolves names and attribute chains to fully qualified import names."""

    def __init__(self, module: cst.Module, tree: Optional[TreeIndex] = None, package: Optional[str] = None) -> None:
        """`package`: the package this module's relative imports start from (`a.b` for `a/b/c.py`
        and for `a/b/__init__.py`); relative imports are only followed for the project's own
        names (`absolute_name`), never taken to name an API."""
        aliases: Dict[str, str] = {}
        relative: Dict[str, str] = {}
        ambiguous: Set[str] = set()
        rebound: Set[str] = set()
        imports: Dict[str, List[cst.CSTNode]] = {}
        stars: List[str] = []

        def bind(local: str, qualified: str, statement: cst.CSTNode, table: Dict[str, str] = aliases) -> None:
            if aliases.get(local, qualified) != qualified or relative.get(local, qualified) != qualified:
                ambiguous.add(local)
            table[local] = qualified
            imports.setdefault(local, []).append(statement)

        for small in _imports(module, tree):
            if type(small) is cst.Import:
                for alias in small.names:
                    full = dotted_name(alias.name)
                    if full is None:
                        continue
                    if alias.asname is not None:
                        bind(alias.asname.name.value, full, small)  # type: ignore[union-attr]
                    else:
                        top = full.split(".")[0]
                        bind(top, top, small)
            elif type(small) is cst.ImportFrom:
                if type(small.names) is cst.ImportStar:
                    base = dotted_name(small.module) if small.module is not None else ""
                    if small.relative:
                        base = _relative_base(package, len(small.relative), base)
                    if base:
                        stars.append(base)
                    continue
                table = aliases
                base = dotted_name(small.module) if small.module is not None else ""
                if small.relative:
                    table = relative
                    base = _relative_base(package, len(small.relative), base)
                if not base:
                    continue
                for alias in small.names:
                    name = dotted_name(alias.name)
                    if name is None:
                        continue
                    local = alias.asname.name.value if alias.asname else name  # type: ignore[union-attr]
                    bind(local, f"{base}.{name}", small, table)
        for stmt in module.body:  # module-level rebinding shadows an import for the whole file
            if type(stmt) in (cst.FunctionDef, cst.ClassDef):
                rebound.add(stmt.name.value)
            elif type(stmt) is cst.SimpleStatementLine:
                for small in stmt.body:
                    targets = ()
                    if type(small) is cst.Assign:
                        targets = tuple(t.target for t in small.targets)
                    elif type(small) in (cst.AnnAssign, cst.AugAssign):
                        targets = (small.target,)
                    for target in targets:
                        if type(target) is cst.Name:
                            rebound.add(target.value)
        self._aliases = {
            local: full
            for local, full in aliases.items()
            if local not in ambiguous and local not in rebound
        }
        self._relative = {local: full for local, full in relative.items()
                          if local not in ambiguous and local not in rebound}
        self._imports = {local: tuple(imports[local]) for local in self._aliases}
        # the modules this one imports everything of (`from .models import *`), absolute
        self.star_modules: Tuple[str, ...] = tuple(dict.fromkeys(stars))
        self._bound_here = rebound | set(aliases) | set(relative)
        # id(expression) -> (the expression, its name): every rule asks of every call, so each
        # is answered once; holding the expression keeps its id from being reused for another
        self._answers: Dict[int, Tuple[cst.CSTNode, Optional[str]]] = {}

    def imports_of(self, local: str) -> Tuple[cst.CSTNode, ...]:
        """The `Import` / `ImportFrom` statements that bind the local name (empty if it is not resolved)."""
        return self._imports.get(local, ())

    def qualified_name(self, expr: cst.BaseExpression) -> Optional[str]:
        """`torch.randn` for `t.randn` under `import torch as t`; None when not imported."""
        head = expr
        while type(head) is cst.Attribute:
            head = head.value  # type: ignore[attr-defined]
        if type(head) is not cst.Name or head.value not in self._aliases:  # type: ignore[attr-defined]
            return None  # most chains (`self.x.y`, `loss.item`) name no import: no string built
        answer = self._answers.get(id(expr))
        if answer is not None:
            return answer[1]
        name = self._qualify(dotted_name(expr))
        self._answers[id(expr)] = (expr, name)
        return name

    def _qualify(self, dotted: Optional[str]) -> Optional[str]:
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        full = self._aliases.get(head)
        if full is None:
            return None
        return f"{full}.{rest}" if rest else full

    def absolute_name(self, dotted: Optional[str]) -> Optional[str]:
        """The absolute name `dotted` is imported as, relative imports included (`Accuracy` ->
        `pkg.metrics.Accuracy` under `from .metrics import Accuracy`); None when not imported."""
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        full = self._aliases.get(head) or self._relative.get(head)
        if full is None:
            return None
        return f"{full}.{rest}" if rest else full

    def star_names(self, dotted: Optional[str]) -> Tuple[str, ...]:
        """What `dotted` may be, absolute, when its head is bound by no import nor at module level
        and the module imports everything of other modules (`maximum_path` under `from utils
        import *`: `utils.maximum_path`), one for each such module."""
        if dotted is None or not self.star_modules or dotted.partition(".")[0] in self._bound_here:
            return ()
        return tuple(f"{base}.{dotted}" for base in self.star_modules)

    def absolute_imports(self) -> Dict[str, str]:
        """Every local name imported, with the absolute name it stands for."""
        return {**self._relative, **self._aliases}

    def call_name(self, node: cst.CSTNode) -> Optional[str]:
        """The qualified name of the function a Call calls, or None."""
        if type(node) is not cst.Call:  # identity, not ABC isinstance (memlint.analysis.tree)
            return None
        func = node.func  # type: ignore[attr-defined]
        head = func  # (`qualified_name`'s first test, here: most calls name no import, and every rule asks)
        while type(head) is cst.Attribute:
            head = head.value  # type: ignore[attr-defined]
        if type(head) is not cst.Name or head.value not in self._aliases:  # type: ignore[attr-defined]
            return None
        return self.qualified_name(func)

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

    def imports(self, module: str) -> bool:
        """Whether the module imports `module` or anything from it (in any scope)."""
        return any(full == module or full.startswith(module + ".") for full in self._aliases.values())

    @property
    def mentions_torch(self) -> bool:
        return any(full == "torch" or full.startswith("torch.") for full in self._aliases.values())


def _relative_base(package: Optional[str], level: int, module: Optional[str]) -> str:
    """The absolute package `from ..x import y` names, from `package`; "" when unknown."""
    if package is None:
        return ""
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return ""
    base = parts[:len(parts) - (level - 1)]
    if module:
        base.append(module)
    return ".".join(base)


@dataclass(frozen=True)
class Reference:
    """One place the module names an imported API: `node` is the whole Name/Attribute chain."""

    qualified: str
    node: cst.BaseExpression
    parent: Optional[cst.CSTNode]  # the node holding it (a Call when it is called, a Decorator ...)

    @property
    def call(self) -> Optional[cst.Call]:
        """The call that calls it, when it is called."""
        if type(self.parent) is cst.Call and self.parent.func is self.node:
            return self.parent
        return None


_NOT_REFERENCES = frozenset({cst.Import, cst.ImportFrom})
_DEFINITIONS = frozenset({cst.FunctionDef, cst.ClassDef, cst.Param})  # their own names are not uses


def references(tree: TreeIndex, names: TorchNames) -> Dict[str, List[Reference]]:
    """Every use of an imported name in the module (import statements excluded), by qualified
    name. Read off the tree index, skipping the subtrees that hold no reference of their own."""
    found: Dict[str, List[Reference]] = {}
    nodes, parents, ends = tree.nodes, tree.parents, tree.ends
    skipped: Set[int] = set()  # names that are no uses: a keyword's, a definition's, an attribute's own
    at, end = 0, len(nodes)
    while at < end:
        node = nodes[at]
        kind = type(node)  # identity, not ABC isinstance (memlint.analysis.tree): every node passes here
        if kind is cst.Name or kind is cst.Attribute:
            if kind is cst.Name and id(node) in skipped:
                at += 1
                continue
            if dotted_name(node) is not None:  # type: ignore[arg-type]
                qualified = names.qualified_name(node)  # type: ignore[arg-type]
                if qualified is not None:
                    found.setdefault(qualified, []).append(
                        Reference(qualified, node, parents.get(id(node))))  # type: ignore[arg-type]
                at = ends[at]  # a chain that does not resolve as a whole has no resolvable part
                continue
            if kind is cst.Attribute:
                skipped.add(id(node.attr))  # type: ignore[attr-defined]
        elif kind in _NOT_REFERENCES:
            at = ends[at]
            continue
        elif kind is cst.Arg:
            if node.keyword is not None:  # type: ignore[attr-defined]
                skipped.add(id(node.keyword))  # type: ignore[attr-defined]
        elif kind in _DEFINITIONS:
            skipped.add(id(node.name))  # type: ignore[attr-defined]
        at += 1
    return found
