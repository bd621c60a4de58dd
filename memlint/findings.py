"""What a rule reports and how it proposes to change the code.

Plain frozen data: a rule builds these, the engine positions and filters them, the fix loop
applies them and the reporters print them.  Edits point at CST nodes of the tree they were
found in, so a Fix is only meaningful together with that tree (the engine never keeps one
across a re-parse).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Optional, Tuple, Union

import libcst as cst

from memlint.torch_target import TorchVersion


class Safety(str, enum.Enum):
    """Whether applying a fix can change what the program computes."""

    SAFE = "safe"  # cannot change behaviour: applied by --fix
    UNSAFE = "unsafe"  # may change behaviour (numbers drawn, backprop truncated): --unsafe-fixes


@dataclass(frozen=True)
class Replace:
    """Put `replacement` where `target` stands."""

    target: cst.CSTNode
    replacement: cst.CSTNode


@dataclass(frozen=True)
class InsertBefore:
    """Insert whole statements just before the statement `anchor`, in the same block."""

    anchor: cst.BaseStatement
    statements: Tuple[cst.BaseStatement, ...]


@dataclass(frozen=True)
class InsertAfter:
    """Insert whole statements just after the statement `anchor`, in the same block."""

    anchor: cst.BaseStatement
    statements: Tuple[cst.BaseStatement, ...]


@dataclass(frozen=True)
class Remove:
    """Remove the whole statement `target` from its block (it must not be the block's only one)."""

    target: cst.BaseStatement


Edit = Union[Replace, InsertBefore, InsertAfter, Remove]


@dataclass(frozen=True)
class Fix:
    edits: Tuple[Edit, ...]
    safety: Safety
    description: str  # imperative, shown as the hint: "Refill one buffer with `x.normal_()`"
    min_torch: Optional[TorchVersion] = None  # the oldest torch the fixed code runs on; None: any


@dataclass(frozen=True)
class Range:
    """1-based line and column of the first character, and of the character after the last."""

    line: int
    column: int
    end_line: int
    end_column: int

    def overlaps(self, other: "Range") -> bool:
        return (self.line, self.column) < (other.end_line, other.end_column) and (
            other.line,
            other.column,
        ) < (self.end_line, self.end_column)


@dataclass(frozen=True)
class Finding:
    code: str
    name: str
    message: str
    path: str
    range: Range
    statement_line: int  # first line of the statement holding the node: `# noqa` may stand there
    fix: Optional[Fix] = None
    cell: Optional[int] = None  # in a notebook: the cell's number (1-based); lines count inside it

    @property
    def line(self) -> int:
        return self.range.line

    @property
    def column(self) -> int:
        return self.range.column

    def detached(self) -> "Finding":
        """This finding without its tree: the fix keeps its safety and description but no
        edits (they name nodes of a tree that is gone). What the cache stores and worker
        processes send back; enough to report, not to fix."""
        if self.fix is None or not self.fix.edits:
            return self
        return replace(self, fix=Fix((), self.fix.safety, self.fix.description))
