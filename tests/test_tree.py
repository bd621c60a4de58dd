"""The tree index reads each node type's fields by code made from the type's annotations
(memlint.analysis.tree). Over every kind of syntax LibCST parses, what it reads must be what the
fields hold: every node that is not formatting, in the order the fields are declared."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import List

import libcst as cst
import pytest

from memlint.analysis.tree import _FORMATTING, _FORMATTING_FIELDS, children, index, walk_scope

REPO = Path(__file__).resolve().parent.parent

EVERY_KIND = '''
"""Module docstring."""
from __future__ import annotations
import os, sys as system
import torch.nn.functional as F
from . import sibling
from ..parent.module import (a as b, c)
from torch import *
x: int = 1; y = z = [1, *rest]; del y
w += 2 ** -x if x else ~x
t = (1,), {1: 2, **extra}, {1, 2}, ...
s = "a" "b" f"{x!r:>{width}} and {y=}" r'raw'
v = [i for i in range(3) if i if not i] + list(j for j in k for m in j)
d = {k: v for k, v in items if k}
u = {e async for e in stream}
slicer = seq[1:2, ::3, ...][lo:hi:step]
chain = a < b <= c != d is not e not in f
logic = a and b or not c
if (n := len(seq)) > 10:
    pass
elif n:
    print(*args, sep="", **kwargs)
else:
    raise ValueError("x") from None
while True:
    break
else:
    continue_ = 1
for i, (j, *k) in enumerate(pairs):
    continue
else:
    assert i, "message"
try:
    pass
except (KeyError, ValueError) as error:
    raise
except Exception:
    pass
else:
    pass
finally:
    pass
try:
    pass
except* OSError as group:
    pass
with open(p) as f, lock:
    global G
async def co(a, /, b: int = 2, *c, d, e=3, **g) -> "T":
    nonlocal h
    await thing
    async for item in aiter_:
        yield item
    async with ctx as (one, two):
        yield from gen
    return lambda q, *r, s=1, **t: q
@decorator
@other(arg)
class C(Base, metaclass=Meta):
    attr: list[int]
    def method[T](self, value: T) -> T:
        return value
type Alias[K] = dict[K, int]
match command:
    case [1, 2, *others]:
        pass
    case {"key": value, **more}:
        pass
    case Point(x=0, y=yy) | Point(0, 0) as point if point:
        pass
    case (None | True | -1 | 1 + 2j):
        pass
    case str() | _:
        pass
'''


def _reference(node: cst.CSTNode) -> List[cst.CSTNode]:
    """What the fields hold, read one by one: the specification `children` must meet."""
    found = []
    for field in dataclasses.fields(node):
        if field.name in _FORMATTING_FIELDS or field.name.startswith("whitespace"):
            continue
        value = getattr(node, field.name)
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, cst.CSTNode) and not isinstance(item, _FORMATTING):
                found.append(item)
    return found


def _every_node(module: cst.Module) -> List[cst.CSTNode]:
    """Every node LibCST made, formatting included (LibCST's own children)."""
    found, stack = [], [module]
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(node.children)
    return found


def _sources() -> List[str]:
    files = sorted((REPO / "fixtures").rglob("*.py")) + sorted((REPO / "examples").rglob("*.py"))
    return [EVERY_KIND] + [f.read_text(encoding="utf-8") for f in files]


def test_the_sample_holds_the_field_kinds_the_compiled_readers_treat_apart():
    kinds = {type(node) for node in _every_node(cst.parse_module(EVERY_KIND))}
    # optional fields (Arg.keyword, Param.default), unions with None (If.orelse, ImportFrom.module),
    # sequences (Call.args), optional sequences (format_spec), unions the annotation cannot settle
    # (ImportFrom.names with ImportStar) and formatting-only fields (Dict.lbrace)
    for kind in (cst.Arg, cst.Param, cst.If, cst.ImportFrom, cst.ImportStar, cst.FormattedStringExpression,
                 cst.Dict, cst.MatchMapping, cst.MatchOr, cst.MatchClass, cst.TryStar, cst.TypeParameters,
                 cst.TypeAlias, cst.NamedExpr, cst.Lambda, cst.Decorator, cst.ConcatenatedString, cst.SetComp,
                 cst.StarredElement, cst.Nonlocal, cst.Await, cst.From):
        assert kind in kinds, kind.__name__


@pytest.mark.parametrize("source", _sources(), ids=lambda s: s.split("\n", 2)[1][:40])
def test_children_are_every_node_the_fields_hold_in_declaration_order(source):
    for node in _every_node(cst.parse_module(source)):
        found = children(node)
        expected = _reference(node)
        assert len(found) == len(expected) and all(a is b for a, b in zip(found, expected)), \
            f"{type(node).__name__}: {[type(n).__name__ for n in found]} != {[type(n).__name__ for n in expected]}"


def test_the_index_holds_each_meaningful_node_once_below_its_parent():
    module = cst.parse_module(EVERY_KIND)
    tree = index(module)
    reachable, stack = [], [module]  # through meaningful children only, by the reference reading
    while stack:
        node = stack.pop()
        reachable.append(node)
        stack.extend(reversed(_reference(node)))
    assert [id(n) for n in tree.nodes] == [id(n) for n in reachable]  # pre-order, each once
    for position, node in enumerate(tree.nodes):
        parent = tree.parent(node)
        if node is module:
            assert parent is None and tree.ends[position] == len(tree.nodes)
        else:
            assert any(child is node for child in children(parent))
            start, end = tree.span(parent)
            assert start < position < end and tree.ends[position] <= end


def test_where_each_node_sits_agrees_with_its_chain_of_parents():
    module = cst.parse_module(EVERY_KIND)
    tree = index(module)
    below = {id(n): 0 for n in tree.nodes}  # how many nodes lie under each one
    for node in tree.nodes[1:]:
        for ancestor in tree.ancestors(node):
            below[id(ancestor)] += 1
    for node in tree.nodes:
        start, end = tree.span(node)
        assert tree.nodes[start] is node and end - start == 1 + below[id(node)]
        chain = list(tree.ancestors(node))
        enclosing = next((a for a in chain if type(a) in (cst.FunctionDef, cst.Lambda)), module)
        assert tree.scope_of(node) is enclosing
        if type(node) in (cst.FunctionDef, cst.Lambda):
            # the class whose body defines it, looking through lambdas but not through functions
            klass = None
            for ancestor in chain:
                if type(ancestor) is cst.FunctionDef:
                    break
                if type(ancestor) is cst.ClassDef:
                    klass = ancestor
                    break
            assert tree.class_of(node) is klass
    method = next(n for n in tree.nodes if type(n) is cst.FunctionDef and n.name.value == "method")
    assert tree.class_of(method).name.value == "C"
    listed = [node for node, _ in tree.listed]
    assert listed == [n for n in tree.nodes if type(n) in (
        cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.Call, cst.Return, cst.Yield, cst.Assign, cst.AnnAssign,
        cst.AugAssign, cst.NamedExpr, cst.For, cst.While, cst.With, cst.Import, cst.ImportFrom)]


@pytest.mark.parametrize("source", _sources(), ids=lambda s: s.split("\n", 2)[1][:40])
def test_the_index_walks_a_scope_as_the_tree_walk_does(source):
    """Every node's walk off the pre-order is the tree walk: the same nodes, in the same order,
    nested functions, classes and lambdas yielded and not entered; a node the index has not
    seen (made by a fix) is walked as a tree."""
    module = cst.parse_module(source)
    tree = index(module)
    for node in tree.nodes:
        expected = list(walk_scope(node))
        found = list(tree.walk_scope(node))
        assert len(found) == len(expected) and all(a is b for a, b in zip(found, expected)), type(node).__name__
    made = cst.parse_statement("def f():\n    g = lambda: h()\n    return g\n")
    assert [type(n) for n in tree.walk_scope(made)] == [type(n) for n in walk_scope(made)]


@pytest.mark.parametrize("source", _sources(), ids=lambda s: s.split("\n", 2)[1][:40])
def test_the_nodes_of_a_kind_in_a_scope_are_those_its_walk_finds(source):
    """`scope_nodes` reads a scope's calls, sums, loops or returns off the listed nodes'
    positions: for every node, exactly the nodes of those kinds its walk yields, in its order
    (a nested function, class or lambda yielded, its inside left out, however deep the nesting
    and wherever it ends); a node the index has not seen is walked."""
    module = cst.parse_module(source)
    tree = index(module)
    kinds = [(cst.Call,), (cst.Assign, cst.AugAssign), (cst.For, cst.While), (cst.If, cst.Return),
             (cst.Return, cst.Yield, cst.FunctionDef, cst.Lambda, cst.ClassDef)]
    for node in tree.nodes:
        for wanted in kinds:
            expected = [n for n in walk_scope(node) if type(n) in wanted]
            found = tree.scope_nodes(node, *wanted)
            assert len(found) == len(expected) and all(a is b for a, b in zip(found, expected)), type(node).__name__
    made = cst.parse_statement("def f():\n    g = lambda: h()\n    return k(g)\n")
    assert [n.func.value for n in tree.scope_nodes(made, cst.Call)] == ["k"]



@pytest.mark.parametrize("source", _sources(), ids=lambda s: s.split("\n", 2)[1][:40])
def test_the_loops_around_a_node_are_those_its_ancestors_hold(source):
    """`loops_around`, kept per statement, is the climb up the node's own ancestors: every
    `for` and `while` whose body (not its header, nor its `else`) holds the node, innermost
    first, up to the function, class or lambda the node runs in; and `nodes_of` gives the
    listed nodes of its kinds in source order, nested scopes included."""
    module = cst.parse_module(source)
    tree = index(module)
    for node in tree.nodes:
        expected, child = [], node
        for ancestor in tree.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                break
            if type(ancestor) in (cst.For, cst.While) and child is ancestor.body:
                expected.append(ancestor)
            child = ancestor
        found = tree.loops_around(node)
        assert len(found) == len(expected) and all(a is b for a, b in zip(found, expected)), type(node).__name__
        found.append(node)  # the caller's own list: what the index keeps is untouched
        assert len(tree.loops_around(node)) == len(expected)
    for kinds in [(cst.FunctionDef,), (cst.Import, cst.ImportFrom), (cst.Call, cst.Return, cst.While)]:
        assert [id(n) for n in tree.nodes_of(*kinds)] == [id(n) for n in tree.nodes if type(n) in kinds]
