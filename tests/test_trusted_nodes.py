"""The parser's nodes built by the trusted `__init__`s: the same trees; hand-made nodes checked as ever."""

import dataclasses
import inspect
import subprocess
import sys
from typing import Tuple

import libcst as cst
import pytest

from memlint.engine import parse
from memlint.jobs import budgets_enforced, map_in_order
from memlint.trusted_nodes import VALIDATES_ONLY, _trusted_init, _trusted_inits, trusted_nodes, unguard
from tests.test_tree import REPO, _every_node, _sources


def test_libcst_checks_nodes_and_nothing_else_after_they_are_built():
    assert VALIDATES_ONLY  # else the trusted `__init__`s are never put in: memlint would parse slower


@pytest.mark.parametrize("source", _sources(), ids=lambda s: s.split("\n", 2)[1][:40])
def test_the_trusted_parse_builds_the_tree_libcst_builds(source):
    trusted, checked = parse(source), cst.parse_module(source)
    assert trusted.deep_equals(checked) and trusted.code == checked.code == source
    covered = {node_class for node_class, _ in _trusted_inits()}
    # every kind of node the parser built came from a trusted `__init__`, each field set alike
    for mine, theirs in zip(_every_node(trusted), _every_node(checked)):
        assert type(mine) in covered, type(mine).__name__
        assert type(mine) is type(theirs) and all(
            getattr(mine, name) == getattr(theirs, name) for name in mine.__dataclass_fields__
            if not isinstance(getattr(mine, name), (cst.CSTNode, tuple, list)))


def test_the_trusted_inits_take_what_the_dataclass_takes():
    with trusted_nodes():
        name = cst.Name("x")  # by position, the defaults filled in
        call, other = cst.Call(func=name), cst.Call(name)  # keywords; fields a factory makes (whitespace)
        clash = cst.Name("not a name")  # (no check within)
    assert name.lpar == () and name.rpar == () and call.args == ()
    assert call.deep_equals(cst.Call(func=cst.Name("x"))) and other.deep_equals(call)
    assert call.whitespace_after_func.deep_equals(cst.SimpleWhitespace(""))
    assert call.whitespace_after_func is not other.whitespace_after_func  # one each, as the factory makes them
    assert clash.value == "not a name"


def test_nodes_built_outside_the_parse_are_checked_again():
    parse("x = [y for y in z]\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")  # hand-made nodes are checked again
    with pytest.raises(ValueError):
        with trusted_nodes():
            raise ValueError("the parse failed")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")  # and after a parse that failed
    assert all(node_class.__init__ is trusted for node_class, trusted in _trusted_inits())  # (put in once)


def test_node_classes_of_other_libraries_keep_their_own_init():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Tagged(cst.Name):  # another library's node class, taking an argument no field holds
        tag: dataclasses.InitVar[str] = ""

        def __post_init__(self, tag: str) -> None:
            object.__setattr__(self, "value", self.value + tag)

    assert _trusted_init(Tagged) is None
    Tagged.__module__ = "libcst._nodes.tagged"  # as if it were LibCST's: its `tag` would be lost
    made = _trusted_init(Tagged)
    assert made is not None and "tag" not in inspect.signature(made).parameters


def _guarded_here(source: str) -> Tuple[bool, bool]:
    """A stand-in for a worker's lint: whether LibCST's node classes are still frozen in this
    process, and whether the parse there builds the tree LibCST's own checked parse builds."""
    guarded = cst.Name.__setattr__ is not object.__setattr__
    trusted, checked = parse(source), cst.parse_module(source)
    return guarded, trusted.deep_equals(checked) and trusted.code == checked.code == source


@pytest.mark.skipif(not budgets_enforced(), reason="without budgets, a single item runs in this process")
def test_a_worker_drops_the_frozen_guard_for_plain_stores_and_its_host_keeps_it():
    """A worker of a run unguards the node classes before its first file (their fields then
    set by plain stores), where the process that hosts memlint (this test run, flake8) keeps
    LibCST's nodes frozen; the trusted parse still builds LibCST's own tree, field by field,
    and nodes made by hand are still checked."""
    sources = _sources()
    results = map_in_order(_guarded_here, sources, jobs=1, size=len, failed=lambda *why: why, budget=100,
                           start=unguard)
    assert results == [(False, True)] * len(sources)
    assert cst.Name.__setattr__ is not object.__setattr__  # kept here
    with pytest.raises(dataclasses.FrozenInstanceError):
        cst.Name("x").value = "y"


def test_the_unguarded_parse_builds_the_tree_libcst_builds_and_checks_hand_made_nodes():
    """In a process of its own (as a worker is), unguarded after trusted `__init__`s were put in:
    they are made again, and every field of every node is set as LibCST's checked parse sets it."""
    script = """
import libcst as cst
from memlint.engine import parse
from memlint.trusted_nodes import _trusted_inits, unguard
from tests.test_tree import _every_node, _sources
parse("x = 1\\n")  # the guarded inits put in first
unguard()
assert all(cls.__setattr__ is object.__setattr__ and cls.__delattr__ is object.__delattr__
           for cls, _ in _trusted_inits())
for source in _sources():
    trusted, checked = parse(source), cst.parse_module(source)
    assert trusted.deep_equals(checked) and trusted.code == checked.code == source
    for mine, theirs in zip(_every_node(trusted), _every_node(checked)):
        assert all(getattr(mine, name) == getattr(theirs, name) for name in mine.__dataclass_fields__
                   if not isinstance(getattr(mine, name), (cst.CSTNode, tuple, list)))
try:
    cst.Name("not a name")
except cst.CSTValidationError:
    print("checked")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "checked\n"
