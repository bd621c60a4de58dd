"""Test code: whether a node runs inside a test (a `test_*` function, a `Test*` class, a
`unittest.TestCase`), where inputs are often made on purpose in ways training code should not
be (random data drawn on the CPU so that every device sees the same numbers).

Asked by the per-step rules through `Facts.per_step` (and MEM103 for random test data), and
by the engine: which modules are test modules (`is_test_file`), and which hold nothing but
tests (`holds_only_tests`). A benchmark module (`is_benchmark_file`) trains only to time its
steps: asked by MEM401, whose harm is to what a model learns.
"""

from __future__ import annotations

import re

import libcst as cst

from memlint.analysis.tree import TreeIndex, dotted_name, last_part

_TEST_FUNCTION = re.compile(r"^_*test", re.IGNORECASE)
_TEST_FOLDERS = frozenset({"test", "tests", "testing", "unittests", "unit_tests"})
_TEST_MODULE = re.compile(r"^(test_\w*|\w*_test|conftest)\.py$")
_TESTS_ONLY = re.compile(r"^(test_\w*|conftest)\.py$")
_TEST_CLASS = re.compile(r"^Test|Test$|TestCase$")
_BENCHMARK_FOLDERS = frozenset({"bench", "benchmark", "benchmarks"})
_BENCHMARK_MODULE = re.compile(r"^(bench|benchmark)\w*\.py$")


def is_test_file(path: str) -> bool:
    """A test module: `test_x.py`, `x_test.py`, `conftest.py`, or any file under a `tests` folder."""
    return _named_or_placed(path, _TEST_MODULE)


def is_benchmark_file(path: str) -> bool:
    """A benchmark module: `bench.py`, `benchmark_*.py`, or a file right inside a `benchmarks`
    folder (not any folder above it: a repository checked out under `~/bench` is no
    benchmark). It trains to time the steps and throws the weights away: what a step computes
    matters there, how well the model learns does not."""
    parts = path.replace("\\", "/").split("/")
    return bool(_BENCHMARK_MODULE.match(parts[-1])) or len(parts) > 1 and parts[-2] in _BENCHMARK_FOLDERS


def holds_only_tests(path: str) -> bool:
    """A test module that is nothing else: under a tests folder, or named `test_*.py` or
    `conftest.py`. A `*_test.py` elsewhere may be a script that trains, then tests
    (`train_and_test.py`)."""
    return _named_or_placed(path, _TESTS_ONLY)


def _named_or_placed(path: str, names: "re.Pattern[str]") -> bool:
    parts = path.replace("\\", "/").split("/")
    return bool(names.match(parts[-1])) or any(part in _TEST_FOLDERS for part in parts[:-1])


def in_test_code(tree: TreeIndex, node: cst.CSTNode) -> bool:
    """Inside a function named `test*` / `_test*`, or a class named `Test*` / `*Test`, or one
    deriving from a `TestCase`."""
    for ancestor in tree.ancestors(node):
        if type(ancestor) is cst.FunctionDef and _TEST_FUNCTION.match(ancestor.name.value):
            return True
        if type(ancestor) is cst.ClassDef and (
                _TEST_CLASS.search(ancestor.name.value)
                or any(_TEST_CLASS.search(last_part(dotted_name(base.value))) for base in ancestor.bases)):
            return True
    return False
