"""Applies the edits of one or more fixes to a module, in one transformer pass.

Edits name nodes of the tree they were found in, by identity.  Callers make sure no two
replacements overlap (the engine picks non-overlapping fixes), so each node is touched by at
most one replacement; any number of statements may be inserted around the same anchor.
"""

from __future__ import annotations

from collections import defaultdict
from typing import DefaultDict, Dict, Iterable, List, Sequence, Union

import libcst as cst

from memlint.findings import Edit, InsertAfter, InsertBefore, Remove, Replace


def _blank_lines_first(statements: Sequence[cst.BaseStatement],
                       anchor: cst.BaseStatement) -> "tuple[list[cst.BaseStatement], cst.BaseStatement]":
    """Blank lines above the anchor move above the inserted statements; its comments stay with it."""
    leading = list(anchor.leading_lines)
    blank = 0
    while blank < len(leading) and leading[blank].comment is None:
        blank += 1
    if not blank or not statements:
        return list(statements), anchor
    first = statements[0].with_changes(leading_lines=(*leading[:blank], *statements[0].leading_lines))
    return [first, *statements[1:]], anchor.with_changes(leading_lines=leading[blank:])


class _ApplyEdits(cst.CSTTransformer):
    def __init__(self, edits: Iterable[Edit]) -> None:
        super().__init__()
        self._replace: Dict[int, cst.CSTNode] = {}
        self._before: DefaultDict[int, List[cst.BaseStatement]] = defaultdict(list)
        self._after: DefaultDict[int, List[cst.BaseStatement]] = defaultdict(list)
        self._remove: set = set()
        for edit in edits:
            if isinstance(edit, Replace):
                self._replace[id(edit.target)] = edit.replacement
            elif isinstance(edit, InsertBefore):
                self._before[id(edit.anchor)].extend(edit.statements)
            elif isinstance(edit, InsertAfter):
                self._after[id(edit.anchor)].extend(edit.statements)
            elif isinstance(edit, Remove):
                self._remove.add(id(edit.target))

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode
                 ) -> Union[cst.CSTNode, cst.FlattenSentinel, cst.RemovalSentinel]:
        key = id(original_node)
        node = self._replace.get(key, updated_node)
        before = self._before.get(key, [])
        after = self._after.get(key, [])
        if key in self._remove:
            return cst.FlattenSentinel([*before, *after]) if before or after else cst.RemovalSentinel.REMOVE
        if not before and not after:
            return node
        before, node = _blank_lines_first(before, node)  # type: ignore[arg-type]
        return cst.FlattenSentinel([*before, node, *after])


def apply_edits(module: cst.Module, edits: Iterable[Edit]) -> cst.Module:
    return module.visit(_ApplyEdits(edits))


def apply_edits_to(node: cst.CSTNode, edits: Iterable[Edit]
                   ) -> Union[cst.CSTNode, cst.FlattenSentinel, cst.RemovalSentinel]:
    """The edits applied to one subtree: what stands in its place (statements around an
    anchor come back flattened; a removed statement as the removal sentinel)."""
    return node.visit(_ApplyEdits(edits))
