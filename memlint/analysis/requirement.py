"""The oldest torch a module's own code needs: the newest API it uses without checking first.

The project's declared requirement (memlint.torch_target) is one lower bound; the code is
another. A module that calls `torch.accelerator.current_accelerator()` runs on torch 2.6 or
later whatever its requirements file says, so advice that matters only before 2.6 does not
apply to it. A use counts only where the code does not check for the API first (`hasattr`,
`try`/`except AttributeError`: memlint.analysis.torchapi.checked_first).

The table holds APIs whose release is certain, each with the minor release that added it; a
name falls under the most specific entry that holds it. Asked as `facts.requirement.needs`,
by MEM505. `exists_test` writes the check a project that supports an older torch puts in front
of a newer API (MEM401's fix and MEM402's advice, which must agree on it).
"""

from __future__ import annotations

from functools import cached_property
from typing import Callable, Dict, FrozenSet, List, Optional

from memlint.analysis.torchapi import checked_first
from memlint.analysis.torchnames import Reference
from memlint.analysis.tree import TreeIndex
from memlint.torch_target import TorchVersion

# API (a module or a name; what it holds counts too) -> the torch release that added it
SINCE = {
    "torch.autocast": TorchVersion(1, 10),
    "torch.amp": TorchVersion(1, 12),
    "torch.amp.autocast": TorchVersion(1, 12),
    "torch.compile": TorchVersion(2, 0),
    "torch.amp.GradScaler": TorchVersion(2, 3),
    "torch.amp.custom_fwd": TorchVersion(2, 4),
    "torch.amp.custom_bwd": TorchVersion(2, 4),
    "torch.serialization.add_safe_globals": TorchVersion(2, 4),
    "torch.nn.attention.flex_attention": TorchVersion(2, 5),
    "torch.accelerator": TorchVersion(2, 6),
    "torch.compiler.set_stance": TorchVersion(2, 6),
}


_WORDS = frozenset(api.rsplit(".", 1)[-1] for api in SINCE)


def since(qualified: str) -> Optional[TorchVersion]:
    """The release that added `qualified`, from the most specific entry holding it."""
    holders = [api for api in SINCE if qualified == api or qualified.startswith(api + ".")]
    return SINCE[max(holders, key=len)] if holders else None


def exists_test(api: str, torch: str, target: Optional[TorchVersion]) -> str:
    """Python that is true where `api` exists, spelled through `torch` (the module's name for
    torch): `hasattr(torch.amp, "GradScaler")`, with `hasattr(torch, "amp")` before it where
    the namespace too is newer than `target`. Every check is one `checked_first` recognises."""
    parts = api.split(".")
    tests = []
    for end in range(2, len(parts) + 1):
        added = SINCE.get(".".join(parts[:end]))
        if added is not None and (target is None or target < added):
            owner = ".".join([torch, *parts[1:end - 1]])
            tests.append(f"hasattr({owner}, \"{parts[end - 1]}\")")
    return " and ".join(tests)


class Requirement:
    """The newest API one module uses unchecked (see the module docstring)."""

    def __init__(self, tree: TreeIndex, references: Callable[[], Dict[str, List[Reference]]],
                 identifiers: Callable[[], FrozenSet[str]]) -> None:
        self.tree = tree
        self._references = references
        self._identifiers = identifiers

    @cached_property
    def needs(self) -> Optional[TorchVersion]:
        """The oldest torch this module's code runs on, from the APIs it uses (None: no telling)."""
        if not _WORDS & self._identifiers():
            return None  # no name of any of them is spelled here: nothing to look up
        found: List[TorchVersion] = []
        for qualified, refs in self._references().items():
            added = since(qualified)
            if added is not None and any(not checked_first(self.tree, ref.node) for ref in refs):
                found.append(added)
        return max(found) if found else None
