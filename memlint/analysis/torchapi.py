"""The public torch API as data shipped with memlint, and whether code checks for an API first.

memlint/data/torch_api.json lists every name that a set of torch's public modules defines
(plus the submodules their packages hold and the names a module-level `__getattr__` serves),
recorded from one installed torch by scripts/torch_api.py. The linter never imports torch.

- `torch_api()`: the data, read once (less the functions torch 2.0 removed and keeps only as
  stubs that raise, `REMOVED`): `version`, `has("torch.cuda.memory_reserved")`,
  `known_module("torch.cuda")` (its namespace was recorded whole), `names_of(module)`,
  `missing(qualified)`: the first part of a dotted name that a recorded module lacks;
- `names_absent_api(module)`: whether Python's AST of a module names anything through torch
  that the data lacks (where not, MEM503 has nothing to judge there);
- `checked_first(tree, node)`: the node runs only after the code checked that an API exists:
  inside `try` with a handler for AttributeError (or ImportError, Exception, a bare except), or
  under an `if` / conditional expression testing `hasattr`, `getattr` or a version.

Only what that one torch has is recorded: a name added in a later release, or removed before
it, is absent too. So "absent" means "not in this torch", never "in no torch"; MEM503 reports
an absent name only where it knows the name was never torch's (see its documentation).
"""

from __future__ import annotations

import ast
import json
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import libcst as cst

from memlint.analysis.tree import TreeIndex, dotted_name, expression_nodes, last_part

DATA = Path(__file__).resolve().parent.parent / "data" / "torch_api.json"
_CHECKS = frozenset({"hasattr", "getattr"})
_CATCHES_MISSING = frozenset({"AttributeError", "ImportError", "ModuleNotFoundError", "Exception",
                              "BaseException"})


class TorchApi:
    def __init__(self, version: str, modules: Dict[str, FrozenSet[str]]) -> None:
        self.version = version
        self._modules = modules

    def known_module(self, qualified: str) -> bool:
        return qualified in self._modules

    def names_of(self, module: str) -> FrozenSet[str]:
        return self._modules.get(module, frozenset())

    def has(self, qualified: str) -> bool:
        module, _, name = qualified.rpartition(".")
        return name in self._modules.get(module, ())

    def missing_last(self, qualified: str) -> Optional[Tuple[str, str]]:
        """`missing(qualified)` when the part missing is the name's last (nothing is read off a
        missing name, so only a chain's last part can be the one missing)."""
        missing = self.missing(qualified)
        return missing if missing is not None and qualified.count(".") == missing[0].count(".") + 1 else None

    def missing(self, qualified: str) -> Optional[Tuple[str, str]]:
        """(recorded module, name it lacks) for the first such part of `qualified`; None when
        every part is there, or the chain leaves the recorded modules before a part is missing.
        Read as Python reads names (NFKC: `K` written with the Kelvin sign is `K`)."""
        parts = unicodedata.normalize("NFKC", qualified).split(".")
        for end in range(1, len(parts)):
            module = ".".join(parts[:end])
            names = self._modules.get(module)
            if names is None:
                return None
            if parts[end] not in names:
                return module, parts[end]
        return None


# Functions torch 2.0 removed but keeps as stubs that raise RuntimeError when called ("deprecated
# since version 1.9 and is now removed") -> the `torch.linalg` function that replaced each (since
# torch 1.8). Read as absent: nothing can call them.
REMOVED = {
    "torch.symeig": "torch.linalg.eigh",
    "torch.eig": "torch.linalg.eig",
    "torch.lstsq": "torch.linalg.lstsq",
    "torch.solve": "torch.linalg.solve",
    "torch.matrix_rank": "torch.linalg.matrix_rank",
}


@lru_cache(maxsize=1)
def torch_api() -> TorchApi:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    modules = {module: frozenset(names) for module, names in data["modules"].items()}
    modules["torch"] = modules["torch"] - {name.rpartition(".")[2] for name in REMOVED}
    return TorchApi(data["torch"], modules)


def names_absent_api(module: ast.Module) -> bool:
    """Whether a module, read from Python's own AST, names through its imports of torch a
    public name the recorded API lacks: `torch.cuda.memory_cache`, `from torch.nn import
    Batchnorm2d`. Where it names none, MEM503 has nothing to judge, so the module need not be
    parsed by LibCST at all. Reads more widely than MEM503 (every import binds, in any scope;
    every prefix of a chain is a name), so it never says no where the rule could report."""
    api = torch_api()
    bound: Dict[str, Set[str]] = {}
    chains: List[ast.Attribute] = []
    froms: List[ast.ImportFrom] = []
    for node in _nodes(module):
        kind = type(node)
        if kind is ast.Attribute:
            chains.append(node)  # type: ignore[arg-type]
        elif kind is ast.Import:
            for alias in node.names:  # type: ignore[attr-defined]
                local = alias.asname or alias.name.partition(".")[0]
                bound.setdefault(local, set()).add(alias.name if alias.asname else local)
        elif kind is ast.ImportFrom and not node.level and node.module:  # type: ignore[attr-defined]
            froms.append(node)  # type: ignore[arg-type]
            for alias in node.names:  # type: ignore[attr-defined]
                bound.setdefault(alias.asname or alias.name, set()).add(f"{node.module}.{alias.name}")  # type: ignore[attr-defined]
    torch_bound = {local: [full for full in fulls if _in_torch(full)] for local, fulls in bound.items()}
    for statement in froms:  # the module as written, or with its first part read as an import
        head, _, rest = statement.module.partition(".")  # type: ignore[union-attr]
        modules = {statement.module, *(f"{full}.{rest}" if rest else full for full in torch_bound.get(head, ()))}
        if any(_in_torch(f"{module}.{alias.name}") and api.missing_last(f"{module}.{alias.name}") is not None
               for module in modules for alias in statement.names):
            return True
    for chain in chains:
        parts = [chain.attr]
        head = chain.value
        while type(head) is ast.Attribute:
            parts.append(head.attr)  # type: ignore[attr-defined]
            head = head.value  # type: ignore[attr-defined]
        if type(head) is not ast.Name:
            continue
        rest = ".".join(reversed(parts))
        for full in torch_bound.get(head.id, ()):  # type: ignore[attr-defined]
            missing = api.missing_last(f"{full}.{rest}")
            if missing is not None and not missing[1].startswith("_"):
                return True
    return False


def _nodes(module: ast.Module) -> Iterator[ast.AST]:
    """Every node of a Python AST, in no particular order: half the cost of `ast.walk`, whose
    generators of fields and children run for every node of every test module."""
    stack: List[ast.AST] = [module]
    node_class = ast.AST
    while stack:
        node = stack.pop()
        yield node
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                stack.extend(item for item in value if isinstance(item, node_class))
            elif isinstance(value, node_class):
                stack.append(value)


def _in_torch(qualified: str) -> bool:
    return qualified == "torch" or qualified.startswith("torch.")


def _checks_api(test: cst.CSTNode) -> bool:
    for node in expression_nodes(test):
        if type(node) is cst.Call and last_part(dotted_name(node.func)) in _CHECKS:
            return True
        if type(node) in (cst.Name, cst.Attribute) and "version" in (last_part(dotted_name(node)) or "").lower():
            return True
    return False


def checked_first(tree: TreeIndex, node: cst.CSTNode) -> bool:
    """Whether `node` runs only where the code made sure an API exists (see the module docstring)."""
    child = node
    for ancestor in tree.ancestors(node):
        if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return False
        if type(ancestor) is cst.Try and child is ancestor.body:
            for handler in ancestor.handlers:
                kind = handler.type
                caught = [e.value for e in kind.elements] if type(kind) is cst.Tuple else [kind]
                if kind is None or any(last_part(dotted_name(c)) in _CATCHES_MISSING for c in caught if c is not None):
                    return True
        if type(ancestor) in (cst.If, cst.IfExp, cst.While) and child is not ancestor.test \
                and _checks_api(ancestor.test):
            return True
        if type(ancestor) is cst.BooleanOperation and child is ancestor.right and _checks_api(ancestor.left):
            return True
        child = ancestor
    return False
