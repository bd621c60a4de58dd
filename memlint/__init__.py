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


def _target(target_torch: Optional[str]):
    from memlint.config import target_torch as parse

    return parse(target_torch, "target_torch") if target_torch is not None else None


def lint_source(source: str, path: str = "<string>", select: Optional[Iterable[str]] = None,
                target_torch: Optional[str] = None) -> List[Finding]:
    """The findings of the default rules (or of `select`: codes, prefixes, "ALL") in `source`;
    fixes that need a torch newer than `target_torch` ("2.1") are not offered."""
    from memlint.engine import check

    return check(source, path, _rules(select), _target(target_torch)).findings


def fix_source(source: str, path: str = "<string>", select: Optional[Iterable[str]] = None,
               unsafe: bool = False, target_torch: Optional[str] = None) -> str:
    """`source` with every safe fix applied (and unsafe ones when `unsafe`), only those that
    run on `target_torch` ("2.1") when given."""
    from memlint.engine import fix

    return fix(source, path, _rules(select), unsafe=unsafe, target_torch=_target(target_torch)).source
