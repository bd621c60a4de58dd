"""memlint: GPU-memory anti-patterns in PyTorch code, found, fixed and verified.

The public API is small: `lint_source` and `fix_source` (the CLI is `memlint.cli`).
"""

from __future__ import annotations

from typing import Iterable, List, Optional

from memlint.findings import Finding

__version__ = "0.1.0"

__all__ = ["Finding", "__version__", "fix_source", "lint_source"]


def _rules(select: Optional[Iterable[str]]):
    from memlint.config import Selection
    from memlint.rules import registry

    return Selection(select=list(select) if select is not None else None).rules(registry())


def lint_source(source: str, path: str = "<string>", select: Optional[Iterable[str]] = None) -> List[Finding]:
    """The findings of the default rules (or of `select`: codes, prefixes, "ALL") in `source`."""
    from memlint.engine import check

    return check(source, path, _rules(select)).findings


def fix_source(source: str, path: str = "<string>", select: Optional[Iterable[str]] = None,
               unsafe: bool = False) -> str:
    """`source` with every safe fix applied (and unsafe ones when `unsafe`)."""
    from memlint.engine import fix

    return fix(source, path, _rules(select), unsafe=unsafe).source
