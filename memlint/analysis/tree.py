"""Fast walks over a LibCST tree, where a node is in it, and how to read small pieces of syntax.

LibCST's own visitor rebuilds every node it passes (`_visit_and_replace_children`), which on
real training code costs about half a parse.  memlint only reads the tree, so it walks the
dataclass fields itself and skips the formatting nodes (whitespace, commas, brackets,
operators) that no analysis looks at: a full walk then costs about a fifth of the parse.

The hottest tests here ask `type(node) is cst.Name`, not `isinstance(node, cst.Name)`: LibCST's
node classes are ABCs, whose isinstance runs Python code for every node that is not one (a few
million times on the training-loop files of the corpus); a concrete node class has no
subclasses, so both answer alike.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import typing
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import lru_cache
from typing import AbstractSet, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, TypeVar

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

_FORMATTING_SET = frozenset(_FORMATTING)

_FORMATTING_FIELDS = frozenset(
    {"lpar", "rpar", "leading_lines", "lines_after_decorators", "header", "footer", "comma",
     "semicolon", "equal", "operator", "dot", "star", "newline", "trailing_whitespace", "async_"}
)

_wanted: Dict[type, bool] = {}  # per concrete type: a node worth walking? (ABC checks are slow)
_LEAVES: Set[type] = set()  # node types with no field that can hold a node (Name: 35% of all nodes)
_TEXT = (str, bool, Optional[str])  # field types that never hold a node
_children_of: Dict[type, Callable[[cst.CSTNode], List[cst.CSTNode]]] = {}  # per type, made when first met


def _holds_text_only(field_type: object) -> bool:
    return field_type in _TEXT or typing.get_origin(field_type) is typing.Literal


def _is_wanted(value_type: type) -> bool:
    """A node, not formatting. Read off the class's MRO: `issubclass` on LibCST's ABCs runs
    Python code for each of the formatting bases."""
    bases = value_type.__mro__
    wanted = cst.CSTNode in bases and _FORMATTING_SET.isdisjoint(bases)
    _wanted[value_type] = wanted
    return wanted


def _kinds(annotation: object) -> Optional[Tuple[bool, bool]]:
    """For a field annotated `annotation`: (may be None, holds a sequence) when whatever it
    holds is surely wanted (its classes and all their subclasses are nodes, not formatting);
    None when the annotation does not settle it."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(members) < len(typing.get_args(annotation))
        if len(members) == 1:
            inner = _kinds(members[0])
            return None if inner is None else (optional or inner[0], inner[1])
        return (optional, False) if all(_surely_wanted(m) for m in members) else None
    if origin in (collections.abc.Sequence, list, tuple):
        args = typing.get_args(annotation)
        if len(args) == 1 and (_surely_wanted(args[0]) or _kinds(args[0]) == (False, False)):
            return (False, True)
        return None
    return (False, False) if _surely_wanted(annotation) else None


@lru_cache(maxsize=None)
def _surely_wanted(annotation: object) -> bool:
    """Every node of this class (and of its subclasses) is wanted."""
    return isinstance(annotation, type) and all(_wanted.get(c, None) or _is_wanted(c) for c in _family(annotation))


def _surely_unwanted(annotation: object) -> bool:
    """The field never holds a wanted node: formatting nodes only (LeftCurlyBrace), or None."""
    members = typing.get_args(annotation) if typing.get_origin(annotation) is typing.Union else (annotation,)
    return all(m is type(None) or isinstance(m, type) and not any(_wanted.get(c, None) or _is_wanted(c)
                                                                   for c in _family(m)) for m in members)


@lru_cache(maxsize=None)
def _family(cls: type) -> Tuple[type, ...]:
    """The class and all its subclasses."""
    found, stack = [cls], [cls]
    while stack:
        for sub in stack.pop().__subclasses__():
            found.append(sub)
            stack.append(sub)
    return tuple(found)


def _keep_wanted(value: object, found: List[cst.CSTNode]) -> None:
    """Append `value` (a node, a sequence of nodes, None or a sentinel) where it is wanted."""
    wanted = _wanted
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
            found.append(value)  # type: ignore[arg-type]


def _make_children_of(node_type: type) -> Callable[[cst.CSTNode], List[cst.CSTNode]]:
    """Compile the children function of one node type: its child-holding fields read in
    declaration order, each as its annotation allows (a field that surely holds a wanted node is
    appended with no test; one the annotation does not settle is tested at run time)."""
    lines = []
    for f in dataclasses.fields(node_type):
        annotation = f.type  # a string, were annotations postponed: then tested at run time
        if f.name in _FORMATTING_FIELDS or f.name.startswith("whitespace") or _holds_text_only(annotation):
            continue
        kinds = _kinds(annotation)
        if kinds is None:
            if not _surely_unwanted(annotation):
                lines.append(f"    keep(node.{f.name}, found)")
            continue
        optional, sequence = kinds
        add = "extend" if sequence else "append"
        if optional:
            lines.append(f"    value = node.{f.name}\n    if value is not None:\n        found.{add}(value)")
        else:
            lines.append(f"    found.{add}(node.{f.name})")
    if not lines:
        _LEAVES.add(node_type)
    code = "def children_of(node):\n    found = []\n" + "\n".join(lines) + ("\n" if lines else "") + "    return found\n"
    namespace: Dict[str, object] = {"keep": _keep_wanted}
    exec(compile(code, f"<children of {node_type.__name__}>", "exec"), namespace)
    function = namespace["children_of"]
    _children_of[node_type] = function  # type: ignore[assignment]
    return function  # type: ignore[return-value]


def children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """The node's meaningful children, in the order its fields are declared."""
    node_type = type(node)
    return (_children_of.get(node_type) or _make_children_of(node_type))(node)


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every meaningful node under `node` (itself included), pre-order, source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children(current)))


Scope = cst.CSTNode  # a FunctionDef, Lambda or the Module
T = TypeVar("T")

# Node kinds whose scope the placement records; any other node finds its scope through its parents.
_SCOPE_RECORDED = frozenset({
    cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.Call, cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For,
    cst.While, cst.With, cst.SimpleStatementLine, cst.Return, cst.Name, cst.Param, cst.NamedExpr, cst.Yield,
    cst.If, cst.Try, cst.Import, cst.ImportFrom})
# Of those, the kinds it also lists in source order, each with its scope: functions, classes,
# calls, what binds or returns a value, and imports. The name index (memlint.analysis.scopes)
# and the import table (memlint.analysis.torchnames) read them instead of walking the tree again.
_LISTED = frozenset({cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.Call, cst.Return, cst.Yield, cst.Assign,
                     cst.AnnAssign, cst.AugAssign, cst.NamedExpr, cst.For, cst.While, cst.With, cst.Import,
                     cst.ImportFrom})
_CLOSING = object()  # on the walk's stack, below a node's children: its subtree ends when it is popped
_FUNCTION_KINDS = (cst.FunctionDef, cst.Lambda)
_STATEMENT_KINDS = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
# the concrete statement classes, for `type(node) in _STATEMENTS`
_STATEMENTS = frozenset(kind for kind in vars(cst).values() if isinstance(kind, type) and
                        any(base in kind.__mro__ for base in _STATEMENT_KINDS) and not kind.__subclasses__())


@dataclass(frozen=True)
class _Placement:
    """Where every node sits: found in the same walk that lists the nodes."""

    order: Dict[int, int]  # id(node) -> pre-order position
    ends: List[int]  # pre-order position -> the position just after that node's subtree
    scopes: Dict[int, Scope]  # id(node) -> the scope it runs in, for the kinds in _SCOPE_RECORDED
    classes: Dict[int, Optional[cst.ClassDef]]  # id(function or lambda) -> the class it is defined in
    listed: List[Tuple[cst.CSTNode, Scope]]  # the kinds in _LISTED, in source order
    listed_at: List[int]  # the pre-order position of each of `listed`


class TreeIndex:
    """Every meaningful node of a module in pre-order (source order), with its parent and
    where its subtree ends: the one full walk of a file, which the engine's rule dispatch and every analysis
    that needs the whole tree read instead of walking again.

    It also answers where a node is: its parent and ancestors, its source order, the scope and
    function it runs in, the class a method belongs to, the loops and the statement around it."""

    def __init__(self, nodes: List[cst.CSTNode], parents: Dict[int, cst.CSTNode], placement: _Placement) -> None:
        self.nodes = nodes
        self.parents = parents  # id(node) -> parent; the module has none
        self.module: cst.Module = nodes[0]  # type: ignore[assignment]
        self._placement = placement
        self._by_kinds: Dict[Tuple[type, ...], Tuple[List[int], List[cst.CSTNode]]] = {}  # `_listed_of`, several kinds
        self._statement_loops: Dict[int, Tuple[cst.CSTNode, ...]] = {}  # id(statement) -> `_loops_above`
        self._by_kind: Optional[Dict[type, Tuple[List[int], List[cst.CSTNode]]]] = None  # `_listed_of`, one kind

    @property
    def listed(self) -> List[Tuple[cst.CSTNode, Scope]]:
        """Functions, lambdas, classes, calls, returns, yields and binding statements, in source
        order, each with the scope it runs in."""
        return self._placement.listed

    @property
    def ends(self) -> List[int]:
        """Pre-order position -> the position just after that node's subtree: a walk of `nodes`
        that jumps to `ends[at]` skips the node at `at` and everything under it."""
        return self._placement.ends

    # -- where a node is ---------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parents.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """From the node's parent up to the module."""
        parents = self.parents
        current = parents.get(id(node))
        while current is not None:
            yield current
            current = parents.get(id(current))

    def order(self, node: cst.CSTNode) -> int:
        """Pre-order position in the module: a node comes after everything left of it."""
        return self._placement.order.get(id(node), -1)

    def scope_of(self, node: cst.CSTNode) -> Scope:
        """The function (or lambda, or the module) `node` runs in."""
        scopes = self._placement.scopes
        scope = scopes.get(id(node))
        if scope is not None:
            return scope
        parents = self.parents
        current = parents.get(id(node))
        while current is not None:
            if type(current) is cst.FunctionDef or type(current) is cst.Lambda:
                return current
            scope = scopes.get(id(current))
            if scope is not None:
                return scope
            current = parents.get(id(current))
        return self.module

    def function_of(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        scope = self.scope_of(node)
        return scope if type(scope) is cst.FunctionDef else None

    def class_of(self, func: cst.CSTNode) -> Optional[cst.ClassDef]:
        """The class a method is defined in (directly), or None."""
        return self._placement.classes.get(id(func))

    def contains(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        """Whether `inner` is `outer` or lies under it: a subtree is a run of the pre-order, so
        this is two look-ups (nodes outside the index, made by a fix, go up their parents)."""
        placement = self._placement
        start = placement.order.get(id(outer))
        at = placement.order.get(id(inner))
        if start is None or at is None:
            return outer is inner or any(a is outer for a in self.ancestors(inner))
        return start <= at < placement.ends[start]

    def span(self, node: cst.CSTNode) -> Tuple[int, int]:
        """The pre-order positions of `node` and everything under it: [start, end)."""
        placement = self._placement
        start = placement.order[id(node)]
        return start, placement.ends[start]

    def walk_scope(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """`walk_scope(node)` read off the pre-order: the nodes of its subtree, a nested
        function, class or lambda yielded and then jumped over. The analyses look for loops,
        returns and yields in whole function bodies many times a file; reading the list costs
        a fifth of walking the tree again. A node outside the index (made by a fix) is walked."""
        placement = self._placement
        at = placement.order.get(id(node))
        if at is None:
            yield from walk_scope(node)
            return
        nodes, ends, new_scopes = self.nodes, placement.ends, _NEW_SCOPES
        end = ends[at]
        yield node
        at += 1
        while at < end:
            current = nodes[at]
            yield current
            at = ends[at] if type(current) in new_scopes else at + 1

    def scope_nodes(self, node: cst.CSTNode, *kinds: type) -> List[cst.CSTNode]:
        """The nodes of `kinds` that `walk_scope(node)` yields, in its order, read off the listed
        nodes' positions (kinds in `_LISTED`; others are walked): a binary search for the node's
        span, the nested functions, classes and lambdas in it jumped over. The analyses ask a
        function's body for its calls, or its sums, over and over; walking it node by node cost
        a twentieth of a lint."""
        placement = self._placement
        start = placement.order.get(id(node))
        listed = self._listed_of(kinds) if start is not None else None
        if listed is None:
            return [n for n in self.walk_scope(node) if type(n) in kinds]
        positions, found = listed
        ends = placement.ends
        end = ends[start]  # type: ignore[index]
        low, high = bisect_left(positions, start), bisect_left(positions, end)  # type: ignore[arg-type]
        if low == high:
            return []
        nested, _ = self._listed_of(_SCOPE_KINDS)  # type: ignore[misc]
        next_scope = bisect_right(nested, start)
        blocked = -1  # the end of the nested scopes seen so far: positions before it are theirs
        kept: List[cst.CSTNode] = []
        for at in range(low, high):
            position = positions[at]
            while next_scope < len(nested) and nested[next_scope] < position:
                blocked = max(blocked, ends[nested[next_scope]])
                next_scope += 1
            if position >= blocked:
                kept.append(found[at])
        return kept

    def nodes_of(self, *kinds: type) -> List[cst.CSTNode]:
        """Every node of `kinds` (kinds in `_LISTED`) in the module, nested scopes included, in
        source order: read off the listed nodes, grouped by kind once."""
        listed = self._listed_of(kinds)
        assert listed is not None, kinds
        return listed[1]

    def _listed_of(self, kinds: Tuple[type, ...]) -> Optional[Tuple[List[int], List[cst.CSTNode]]]:
        """The pre-order positions of the listed nodes of `kinds`, ascending, and the nodes;
        None where a kind is not listed."""
        if not _LISTED.issuperset(kinds):
            return None
        if self._by_kind is None:
            by_kind: Dict[type, Tuple[List[int], List[cst.CSTNode]]] = {}
            placement = self._placement
            for (node, _), position in zip(placement.listed, placement.listed_at):
                entry = by_kind.get(type(node))
                if entry is None:
                    entry = by_kind[type(node)] = ([], [])
                entry[0].append(position)
                entry[1].append(node)
            self._by_kind = by_kind
        if len(kinds) == 1:
            return self._by_kind.get(kinds[0], _NONE_LISTED)
        found = self._by_kinds.get(kinds)  # several kinds: their lists merged in source order, once
        if found is None:
            pairs = sorted(pair for kind in kinds for pair in zip(*self._by_kind.get(kind, _NONE_LISTED)))
            found = self._by_kinds[kinds] = ([position for position, _ in pairs], [node for _, node in pairs])
        return found

    def in_subtree(self, node: cst.CSTNode, items: Sequence[T], orders: Sequence[int]) -> Sequence[T]:
        """The `items` under `node`, given their pre-order `orders` in ascending order: a
        binary search, where testing each item would cost the length of the list per question."""
        start, end = self.span(node)
        return items[bisect_left(orders, start):bisect_left(orders, end)]

    def under(self, node: cst.CSTNode, roots: List[cst.CSTNode]) -> bool:
        """Whether `node` lies under one of `roots`."""
        return any(self.contains(root, node) for root in roots)

    def loops_around(self, node: cst.CSTNode) -> List[cst.CSTNode]:
        """The loops whose body holds `node`, innermost first, within its function."""
        return list(self._loops_above(node))

    def _loops_above(self, node: cst.CSTNode) -> Tuple[cst.CSTNode, ...]:
        """`loops_around`, kept for each statement: a loop is a statement, so none lies between
        a node and the innermost statement above it, and the nodes of a statement share the
        loops above it (the rules ask this of most calls, names and assignments)."""
        parents = self.parents
        child, ancestor = node, parents.get(id(node))
        while ancestor is not None:
            kind = type(ancestor)
            if kind in _NEW_SCOPES:
                return ()
            if kind in _STATEMENTS:
                known = self._statement_loops.get(id(ancestor))
                if known is None:
                    known = self._statement_loops[id(ancestor)] = self._loops_above(ancestor)
                if (kind is cst.For or kind is cst.While) and child is ancestor.body:  # type: ignore[attr-defined]
                    return (ancestor, *known)
                return known
            child, ancestor = ancestor, parents.get(id(ancestor))
        return ()

    # -- statements --------------------------------------------------------------------------
    def statement_of(self, call: cst.Call) -> Optional[cst.SimpleStatementLine]:
        """The statement line that is nothing but `call` (`opt.step()`), else None."""
        expr = self.parent(call)
        line = self.parent(expr) if expr is not None else None
        if type(expr) is cst.Expr and type(line) is cst.SimpleStatementLine and len(line.body) == 1:
            return line
        return None

    def statement_around(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The innermost whole statement holding `node`."""
        for ancestor in (node, *self.ancestors(node)):
            if isinstance(ancestor, _STATEMENT_KINDS):
                return ancestor
        return None

    def siblings(self, stmt: cst.CSTNode) -> Tuple[Tuple[cst.CSTNode, ...], int]:
        """The statements of the block holding `stmt`, and its index there ((), -1 if none)."""
        body = getattr(self.parent(stmt), "body", ())
        if isinstance(body, (list, tuple)):
            for position, item in enumerate(body):
                if item is stmt:
                    return tuple(body), position
        return (), -1

    def next_statement(self, stmt: cst.CSTNode) -> Optional[cst.CSTNode]:
        body, position = self.siblings(stmt)
        return body[position + 1] if 0 <= position < len(body) - 1 else None

    def dominating_block(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The block after whose statement `node` has surely run (a `with` body runs whole,
        unless its manager swallows exceptions: `with contextlib.suppress(...)`)."""
        block = self.parent(node)
        while block is not None:
            kind = type(block)
            if kind is cst.Module:
                return block
            if kind is cst.IndentedBlock or kind is cst.SimpleStatementSuite:
                around = self.parent(block)
                if type(around) is not cst.With or _suppresses(around):  # type: ignore[arg-type]
                    return block
            block = self.parent(block)
        return None


def _suppresses(statement: cst.With) -> bool:
    """`with suppress(...)` (contextlib's, by its name): the body may stop anywhere and the code
    after the `with` still run."""
    return any(type(item.item) is cst.Call and last_part(dotted_name(item.item.func) or "") == "suppress"  # type: ignore[attr-defined]
               for item in statement.items)


def index(module: cst.Module) -> TreeIndex:
    """Walk the module once: every meaningful node in pre-order with its parent, and where it
    sits (`_Placement`). The walk keeps the parent, scope and class of the nodes it pops; a node
    with children pushes them whole, above a marker that holds its position and what was
    current before it: popped, the marker closes the node's subtree and restores them."""
    nodes: List[cst.CSTNode] = []
    ends: List[int] = []
    parents: Dict[int, cst.CSTNode] = {}
    scopes: Dict[int, Scope] = {}
    classes: Dict[int, Optional[cst.ClassDef]] = {}
    listed: List[Tuple[cst.CSTNode, Scope]] = []
    listed_at: List[int] = []
    stack: List[object] = [module]  # nodes, and markers (tuples) below each node's children
    pop, push, extend, leaves, made = stack.pop, stack.append, stack.extend, _LEAVES, _children_of
    recorded, wanted, new_scopes = _SCOPE_RECORDED, _LISTED, _NEW_SCOPES
    parent: Optional[cst.CSTNode] = None
    scope, klass = module, None
    while stack:  # about six nodes a line: a tuple or a call less per node is a tenth of this walk
        node = pop()
        node_type = type(node)
        if node_type is tuple:
            position, parent, scope, klass = node  # type: ignore[misc]
            ends[position] = len(nodes)
            continue
        position = len(nodes)
        nodes.append(node)  # type: ignore[arg-type]
        ends.append(position + 1)
        key = id(node)
        parents[key] = parent  # type: ignore[assignment]
        if node_type in recorded:  # concrete types: `in` beats ABC isinstance
            scopes[key] = scope
            if node_type in wanted:
                listed.append((node, scope))  # type: ignore[arg-type]
                listed_at.append(position)
            if node_type is cst.FunctionDef or node_type is cst.Lambda:
                classes[key] = klass
        if node_type in leaves:
            continue
        kids = (made.get(node_type) or _make_children_of(node_type))(node)  # type: ignore[arg-type]
        if kids:
            push((position, parent, scope, klass))
            kids.reverse()
            extend(kids)
            parent = node  # type: ignore[assignment]
            if node_type in new_scopes:
                if node_type is cst.ClassDef:
                    klass = node  # type: ignore[assignment]
                else:
                    scope = node  # type: ignore[assignment]
                    if node_type is cst.FunctionDef:
                        klass = None
    del parents[id(module)]  # (recorded as its children's are, with None): the module has no parent
    order = dict(zip(map(id, nodes), range(len(nodes))))
    return TreeIndex(nodes, parents, _Placement(order, ends, scopes, classes, listed, listed_at))


_NEW_SCOPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})
_NONE_LISTED: Tuple[List[int], List[cst.CSTNode]] = ([], [])  # (never changed: read only)
_SCOPE_KINDS = tuple(_NEW_SCOPES)  # (for `scope_nodes`' look-up of the nested scopes)
NEW_SCOPES = _NEW_SCOPES  # for `type(node) in NEW_SCOPES`, where an ABC isinstance is too slow
_OWN_SCOPE_EXPRESSIONS = frozenset({cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp})
OWN_SCOPE_EXPRESSIONS = _OWN_SCOPE_EXPRESSIONS  # expressions whose body runs apart from them (or not at all)


def walk_scope(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Like `walk`, but does not enter nested functions, classes or lambdas (they are yielded)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if current is not node and type(current) in _NEW_SCOPES:
            continue
        stack.extend(reversed(children(current)))


def expression_nodes(expr: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The nodes of an expression, lambdas and comprehensions not entered."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        if type(node) not in _OWN_SCOPE_EXPRESSIONS:
            stack.extend(children(node))


def dotted_name(expr: cst.BaseExpression) -> "str | None":
    """`a.b.c` for a Name/Attribute chain, else None."""
    if type(expr) is cst.Name:
        return expr.value  # type: ignore[attr-defined]
    parts = []
    while type(expr) is cst.Attribute:
        parts.append(expr.attr.value)  # type: ignore[attr-defined]
        expr = expr.value  # type: ignore[attr-defined]
    if type(expr) is not cst.Name:
        return None
    parts.append(expr.value)  # type: ignore[attr-defined]
    return ".".join(reversed(parts))


def constructed(value: cst.BaseExpression, moves: AbstractSet[str]) -> cst.BaseExpression:
    """The call a chain of `moves` starts from: `CustomHubert(path)` of
    `CustomHubert(path).to(device).eval()`."""
    while type(value) is cst.Call and type(value.func) is cst.Attribute and \
            value.func.attr.value in moves and type(value.func.value) is cst.Call:  # type: ignore[attr-defined]
        value = value.func.value  # type: ignore[attr-defined]
    return value


def base_class(base: cst.BaseExpression) -> cst.BaseExpression:
    """The class a base of a class statement names: `Embeddings` for a generic class's
    `Embeddings[Sentence]` (flair's embeddings derive so from their nn.Module)."""
    return base.value if type(base) is cst.Subscript else base  # type: ignore[attr-defined]


def own_method(klass: cst.ClassDef, name: str) -> Optional[cst.FunctionDef]:
    """The method `name` that the body of `klass` defines itself (not one it inherits)."""
    return next((s for s in klass.body.body  # type: ignore[misc]
                 if type(s) is cst.FunctionDef and s.name.value == name), None)  # type: ignore[attr-defined]


def holder(expr: cst.BaseExpression) -> cst.BaseExpression:
    """What holds an entry: `self.stats` for `self.stats["loss"]` (subscripts taken off)."""
    while type(expr) is cst.Subscript:
        expr = expr.value  # type: ignore[attr-defined]
    return expr


def root_name(expr: cst.BaseExpression) -> Optional[str]:
    """The name an attribute or item chain starts from: `self` for `self.totals[k].x`."""
    while type(expr) is cst.Attribute or type(expr) is cst.Subscript:
        expr = expr.value  # type: ignore[attr-defined]
    return expr.value if type(expr) is cst.Name else None  # type: ignore[attr-defined]


def last_part(dotted: Optional[str]) -> str:
    """`step` for `self.opt.step`; "" for None."""
    return dotted.rsplit(".", 1)[-1] if dotted else ""


def string_key(node: cst.Subscript) -> Optional[str]:
    """The string a subscript names (`"kl"` of `metrics["kl"]`); None for any other key (a
    name, a slice, a bytes literal, several keys)."""
    keys = node.slice
    if len(keys) == 1 and type(keys[0].slice) is cst.Index and type(keys[0].slice.value) is cst.SimpleString:  # type: ignore[attr-defined]
        key = keys[0].slice.value.evaluated_value  # type: ignore[attr-defined]
        return key if isinstance(key, str) else None
    return None


def is_docstring(statement: cst.CSTNode) -> bool:
    """A statement line that is one string and nothing else."""
    return type(statement) is cst.SimpleStatementLine and len(statement.body) == 1 and \
        type(statement.body[0]) is cst.Expr and type(statement.body[0].value) in (cst.SimpleString, cst.ConcatenatedString)


def compares_name_to_main(test: cst.BaseExpression) -> bool:
    """`__name__` compared once with `"__main__"` (either way round, by any operator)."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:  # type: ignore[attr-defined]
        return False
    sides = (test.left, test.comparisons[0].comparator)  # type: ignore[attr-defined]
    return {dotted_name(side) for side in sides} == {"__name__", None} and any(
        type(side) is cst.SimpleString and side.evaluated_value == "__main__" for side in sides)  # type: ignore[attr-defined]


def literal_bool(expr: Optional[cst.BaseExpression]) -> Optional[bool]:
    """True / False for the literal names, else None."""
    if type(expr) is cst.Name and expr.value in ("True", "False"):
        return expr.value == "True"
    return None


def argument(call: cst.Call, keyword: str, position: Optional[int] = None) -> Optional[cst.Arg]:
    """The argument given for a parameter: by keyword, else (with `position`) the
    position-th plain positional argument."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
    if position is not None:
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if len(positional) > position:
            return positional[position]
    return None
