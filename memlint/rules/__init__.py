"""The registry: every module in this package defines one rule; their codes map to them.

Modules whose name starts with `_` hold what rules share (memlint.rules._code) and define none.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from typing import Dict, Type

from memlint.rule import Rule


@lru_cache(maxsize=None)
def registry() -> Dict[str, Type[Rule]]:
    """Code -> rule class, in code order."""
    rules: Dict[str, Type[Rule]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value.__module__ == module.__name__:
                if value.CODE in rules:
                    raise RuntimeError(f"two rules claim {value.CODE}")
                rules[value.CODE] = value
    return dict(sorted(rules.items()))
