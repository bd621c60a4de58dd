"""Fast walks over a LibCST tree.

LibCST's own visitor rebuilds every node it passes (`_visit_and_replace_children`), which on
real training code costs about half a parse.  memlint only reads the tree, so it walks the
dataclass fields itself and skips the formatting nodes (whitespace, commas, brackets,
operators) that no analysis looks at: a full walk then costs about a fifth of the parse.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Tuple

import libcst as cst

# Node types that only carry formatting; no rule or analysis reads them.
_FORMATTING = (
    cst.BaseParenthesizableWhitespace,
    cst.Comma,
    cst.Semicolon,
    cst.Colon,
    cst.Dot,
    cst.AssignEqual,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.EmptyLine,
    cst.Newline,
    cst.TrailingWhitespace,
    cst.Comment,
    cst.BaseBinaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseUnaryOp,
    cst.BaseAugOp,
    cst.Asynchronous,
    cst.ImportStar,
)

_FORMATTING_FIELDS = frozenset(
    {"lpar", "rpar", "leading_lines", "lines_after_decorators", "header", "footer", "comma",
     "semicolon", "equal", "operator", "dot", "star", "newline", "trailing_whitespace", "async_"}
)

_field_getters: Dict[type, Callable[[cst.CSTNode], Tuple[object, ...]]] = {}
_wanted: Dict[type, bool] = {}  # per concrete type: a node worth walking? (ABC checks are slow)


def _getter(node_type: type) -> Callable[[cst.CSTNode], Tuple[object, ...]]:
    """A function returning the node's child-holding fields as a tuple (cached per type)."""
    names = tuple(
        f.name for f in dataclasses.fields(node_type)
        if f.name not in _FORMATTING_FIELDS and not f.name.startswith("whitespace")
    )
    if len(names) == 1:
        single = operator.attrgetter(names[0])
        getter: Callable[[cst.CSTNode], Tuple[object, ...]] = lambda node: (single(node),)
    elif names:
        getter = operator.attrgetter(*names)  # type: ignore[assignment]
    else:
        getter = lambda node: ()
    _field_getters[node_type] = getter
    return getter


def _is_wanted(value_type: type) -> bool:
    wanted = issubclass(value_type, cst.CSTNode) and not issubclass(value_type, _FORMATTING)
    _wanted[value_type] = wanted
    return wanted


def children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """The node's meaningful children, in source order."""
    node_type = type(node)
    getter = _field_getters.get(node_type) or _getter(node_type)
    wanted = _wanted
    found = []
    for value in getter(node):
        value_type = type(value)
        if value_type is tuple or value_type is list:
            for item in value:  # type: ignore[attr-defined]
                item_type = type(item)
                keep = wanted.get(item_type)
                if keep or (keep is None and _is_wanted(item_type)):
                    found.append(item)
        else:
            keep = wanted.get(value_type)
            if keep or (keep is None and _is_wanted(value_type)):
                found.append(value)
    return found


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every meaningful node under `node` (itself included), pre-order, source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children(current)))


@dataclass(frozen=True)
class TreeIndex:
    """Every meaningful node of a module in pre-order (source order), with its depth and
    parent: the one full walk of a file, which the engine's rule dispatch and the analyses
    that need the whole tree (analysis/training.py) both read instead of walking again."""

    nodes: List[cst.CSTNode]
    depths: List[int]
    parents: Dict[int, cst.CSTNode]  # id(node) -> parent; the module has none


def index(module: cst.Module) -> TreeIndex:
    nodes: List[cst.CSTNode] = []
    depths: List[int] = []
    parents: Dict[int, cst.CSTNode] = {}
    stack: List[Tuple[cst.CSTNode, int]] = [(module, 0)]
    while stack:
        node, depth = stack.pop()
        nodes.append(node)
        depths.append(depth)
        kids = children(node)
        for child in kids:
            parents[id(child)] = node
        stack.extend((child, depth + 1) for child in reversed(kids))
    return TreeIndex(nodes, depths, parents)


NEW_SCOPE = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def walk_scope(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Like `walk`, but does not enter nested functions, classes or lambdas (they are yielded)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if current is not node and isinstance(current, NEW_SCOPE):
            continue
        stack.extend(reversed(children(current)))


def dotted_name(expr: cst.BaseExpression) -> "str | None":
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if not isinstance(expr, cst.Name):
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))
