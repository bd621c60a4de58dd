"""The public torch API as data shipped with memlint, and whether code checks for an API first.

memlint/data/torch_api.json lists every name that a set of torch's public modules defines
(plus the submodules their packages hold and the names a module-level `__getattr__` serves),
recorded from one installed torch by scripts/torch_api.py. The linter never imports torch.

- `torch_api()`: the data, read once: `version`, `has("torch.cuda.memory_reserved")`,
  `known_module("torch.cuda")` (its namespace was recorded whole), `names_of(module)`,
  `missing(qualified)`: the first part of a dotted name that a recorded module lacks;
- `checked_first(tree, node)`: the node runs only after the code checked that an API exists:
  inside `try` with a handler for AttributeError (or ImportError, Exception, a bare except), or
  under an `if` / conditional expression testing `hasattr`, `getattr` or a version.

Only what that one torch has is recorded: a name added in a later release, or removed before
it, is absent too. So "absent" means "not in this torch", never "in no torch"; MEM503 reports
an absent name only where it knows the name was never torch's (see its documentation).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Dict, FrozenSet, Optional, Tuple

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

    def missing(self, qualified: str) -> Optional[Tuple[str, str]]:
        """(recorded module, name it lacks) for the first such part of `qualified`; None when
        every part is there, or the chain leaves the recorded modules before a part is missing."""
        parts = qualified.split(".")
        for end in range(1, len(parts)):
            module = ".".join(parts[:end])
            names = self._modules.get(module)
            if names is None:
                return None
            if parts[end] not in names:
                return module, parts[end]
        return None


@lru_cache(maxsize=1)
def torch_api() -> TorchApi:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    return TorchApi(data["torch"], {module: frozenset(names) for module, names in data["modules"].items()})


def _checks_api(test: cst.CSTNode) -> bool:
    for node in expression_nodes(test):
        if isinstance(node, cst.Call) and last_part(dotted_name(node.func)) in _CHECKS:
            return True
        if isinstance(node, (cst.Name, cst.Attribute)) and "version" in (last_part(dotted_name(node)) or "").lower():
            return True
    return False


def checked_first(tree: TreeIndex, node: cst.CSTNode) -> bool:
    """Whether `node` runs only where the code made sure an API exists (see the module docstring)."""
    child = node
    for ancestor in tree.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(ancestor, cst.Try) and child is ancestor.body:
            for handler in ancestor.handlers:
                kind = handler.type
                caught = [e.value for e in kind.elements] if isinstance(kind, cst.Tuple) else [kind]
                if kind is None or any(last_part(dotted_name(c)) in _CATCHES_MISSING for c in caught if c is not None):
                    return True
        if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) and child is not ancestor.test \
                and _checks_api(ancestor.test):
            return True
        if isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right and _checks_api(ancestor.left):
            return True
        child = ancestor
    return False
