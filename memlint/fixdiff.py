"""The diff of one fix alone, made from the statements it edits, not from the whole file.

A file with a finding every few lines would otherwise pay a whole-file rewrite, print and diff
per finding: time quadratic in the file. Here each edit is widened to the outermost statement
among those the fix touches; only those statements are printed (before and after the edits,
at their own indentation) and diffed, with three lines of context from the source around them.

What the whole-file way would show is what this shows, as long as the statements print back as
the source has them; each is checked against the source, and when one is not (the file's last
line without a newline), the diff falls back to the whole file. Unlike `--fix`, a diff does not
check that the fixed file still parses: it shows what the fix would write.
"""

from __future__ import annotations

import difflib
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import CodeRange, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from memlint.edits import apply_edits_to
from memlint.findings import Edit, Fix, Remove, Replace
from memlint.positions import Positions, ancestors, indents, split_lines, statement_of

CONTEXT = 3  # lines of context around a change, as `diff -u`



class _NoRegion(Exception):
    """The edits cannot be placed by statement: the caller diffs the whole file."""


def _edited_node(edit: Edit) -> cst.CSTNode:
    return edit.target if isinstance(edit, (Replace, Remove)) else edit.anchor  # type: ignore[union-attr]


def _regions(fix: Fix, parents: Mapping[int, cst.CSTNode]) -> Dict[int, Tuple[cst.CSTNode, List[Edit]]]:
    """The outermost statements the fix edits, each with the edits inside it."""
    by_statement: Dict[int, Tuple[cst.CSTNode, List[Edit]]] = {}
    for edit in fix.edits:
        statement = statement_of(_edited_node(edit), parents)
        if statement is None:
            raise _NoRegion
        by_statement.setdefault(id(statement), (statement, []))[1].append(edit)
    regions: Dict[int, Tuple[cst.CSTNode, List[Edit]]] = {}
    for key, (statement, edits) in by_statement.items():
        outer = [a for a in ancestors(statement, parents) if id(a) in by_statement]
        home = outer[-1] if outer else statement  # the outermost edited statement around it
        regions.setdefault(id(home), (home, []))[1].extend(edits)
    return regions


def _render(statements: Sequence[cst.CSTNode], indents: List[str], module: cst.Module) -> str:
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    state.indent_tokens = list(indents)
    for statement in statements:
        statement._codegen(state)
    return "".join(state.tokens)


def _first_line(statement: cst.CSTNode, indents: List[str], module: cst.Module,
                start: CodeRange) -> Tuple[int, str]:
    """(index of the first source line `statement` prints, its printed text): its syntactic
    start is known; the lines before it (comments, blank lines, decorators) are counted here."""
    provider = PositionProvider()
    state = PositionProvidingCodegenState(default_indent=module.default_indent,
                                          default_newline=module.default_newline, provider=provider)
    state.indent_tokens = list(indents)
    statement._codegen(state)
    own = provider._computed[statement]
    return start.start.line - own.start.line, "".join(state.tokens)


def _after(statement: cst.CSTNode, edits: Sequence[Edit]) -> List[cst.CSTNode]:
    result = apply_edits_to(statement, edits)
    if isinstance(result, cst.RemovalSentinel):
        return []
    if isinstance(result, cst.FlattenSentinel):
        return list(result.nodes)
    return [result]


def _hunks(lines: Sequence[str], changes: Sequence[Tuple[int, int, List[str]]]) -> str:
    """Unified-diff hunks for replacing, in `lines`, each (start, count, new lines), sorted and disjoint."""
    groups: List[List[Tuple[int, int, List[str]]]] = []
    for change in changes:
        if groups and change[0] - (groups[-1][-1][0] + groups[-1][-1][1]) <= 2 * CONTEXT:
            groups[-1].append(change)
        else:
            groups.append([change])
    out: List[str] = []
    shift = 0  # lines the earlier groups added
    for group in groups:
        low = max(0, group[0][0] - CONTEXT)
        high = min(len(lines), group[-1][0] + group[-1][1] + CONTEXT)
        before = list(lines[low:high])
        after: List[str] = []
        at = low
        for start, count, new in group:
            after.extend(lines[at:start])
            after.extend(new)
            at = start + count
        after.extend(lines[at:high])
        for line in list(difflib.unified_diff(before, after, n=CONTEXT))[2:]:
            if line.startswith("@@"):
                old, new = line.split(" ")[1:3]
                line = f"@@ {_moved(old, low)} {_moved(new, low + shift)} @@\n"
            out.append(line)
        shift += sum(len(new) - count for _, count, new in group)
    return "".join(out)


def _moved(span: str, offset: int) -> str:
    sign, numbers = span[0], span[1:]
    start, _, length = numbers.partition(",")
    return f"{sign}{int(start) + offset}{',' + length if length else ''}"


def regional_diff(module: cst.Module, lines: Sequence[str], fix: Fix,
                  parents: Mapping[int, cst.CSTNode], positions: "Mapping[cst.CSTNode, CodeRange] | Positions",
                  header: str) -> Optional[str]:
    """The unified diff (with `header`) of applying `fix` to `module`, whose text is in `lines`
    (split_lines); None when the edits cannot be placed by statement."""
    try:
        changes = []
        for statement, edits in _regions(fix, parents).values():
            indent = indents(statement, parents, module)
            first, old = _first_line(statement, indent, module, positions[statement])
            old_lines = split_lines(old)
            if list(lines[first:first + len(old_lines)]) != old_lines:
                return None
            new_lines = split_lines(_render(_after(statement, edits), indent, module))
            changes.append((first, len(old_lines), new_lines))
    except (_NoRegion, KeyError):
        return None
    changes.sort(key=lambda change: change[0])
    for (start, count, _), (next_start, _, _) in zip(changes, changes[1:]):
        if start + count > next_start:
            return None
    hunks = _hunks(lines, changes)
    return header + hunks if hunks else ""
