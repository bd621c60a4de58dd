"""The shape every rule has.

A rule is a small class: its code, name and one-line message; the best safety its fixes can
have; what the verifier must observe after its fix (its claim); a docstring that is its
documentation; and VALID / INVALID examples that are run as tests and shown by
`memlint explain`.  It defines `visit_<Node>` / `leave_<Node>` methods for the LibCST node
types it cares about, asks `self.facts` (memlint.analysis) for anything it needs to know about
the code, and calls `self.report(node, ...)`.
"""

from __future__ import annotations

import ast
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Optional, Sequence, Tuple

import libcst as cst

from memlint.findings import Fix, Safety

if TYPE_CHECKING:
    from memlint.analysis import Facts
    from memlint.engine import FileContext
    from memlint.torch_target import TorchVersion


class Claim(str, enum.Enum):
    """What running the code after the fix must show, for the verifier to confirm the fix."""

    PEAK_LOWER = "peak-lower"
    TIME_LOWER = "time-lower"
    OUTPUT_IDENTICAL = "output-identical"
    GRADIENTS_FIXED = "gradients-fixed"
    IMBALANCE_LOWER = "imbalance-lower"  # peak memory more even across the GPUs
    NONE = "none"


@dataclass(frozen=True)
class Invalid:
    """An example the rule must report; `fixed` is what its fix must turn it into."""

    code: str
    fixed: Optional[str] = None


class Rule:
    CODE: ClassVar[str]
    NAME: ClassVar[str]
    MESSAGE: ClassVar[str]
    FIX_SAFETY: ClassVar[Optional[Safety]] = None  # None: the rule only reports
    CLAIM: ClassVar[Claim] = Claim.NONE
    DEFAULT_ON: ClassVar[bool] = True
    # Words a file must contain for the rule to look at it at all (checked before parsing).
    REQUIRES: ClassVar[Tuple[str, ...]] = ("torch",)
    # Whether it reports in test modules too (`test_*.py`, files under `tests/`): a memory or
    # speed cost, or a deprecation warning, in a test is not worth a change; a call that raises is.
    IN_TESTS: ClassVar[bool] = False
    # Whether it reports only in PyTorch code (memlint.analysis.Facts.uses_torch): every rule of
    # memlint's does; a rule about code in general would not.
    TORCH_ONLY: ClassVar[bool] = True
    VALID: ClassVar[Sequence[str]] = ()
    INVALID: ClassVar[Sequence[Invalid]] = ()

    def __init__(self, context: "FileContext") -> None:
        self.context = context
        # (attributes, not properties: a rule reads its facts at nearly every node it handles)
        self.facts: "Facts" = context.facts
        # the oldest torch the project supports (None: no constraint). A fix states what it
        # needs in `Fix.min_torch`; the engine withholds it below this.
        self.target_torch: Optional["TorchVersion"] = context.target_torch

    @classmethod
    def may_report(cls, module: ast.Module) -> bool:
        """Whether the rule may report anything in a module, told from Python's own AST of it,
        before LibCST parses it (memlint.engine reads test modules this way first: where no rule
        of tests may report, the parse, most of a lint's cost, is skipped). True unless a rule
        can tell."""
        return True

    def report(self, node: cst.CSTNode, message: Optional[str] = None,
               fix: Optional[Fix] = None) -> None:
        self.context.report(self, node, message or self.MESSAGE, fix)
