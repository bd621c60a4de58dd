"""The engine: one traversal, the fix loop, and what it refuses to write."""

from __future__ import annotations

import warnings

import libcst as cst
import pytest

from memlint.analysis.project import ProjectView
from memlint.engine import MAX_FIX_ROUNDS, SourceError, check, fix, wanted_rules
from memlint.findings import Fix, InsertAfter, InsertBefore, Replace, Safety
from memlint.rule import Rule
from memlint.rules import registry


class _NumbersToNames(Rule):
    """Turns each integer literal into a name (a test rule: every fix replaces one node)."""

    CODE = "MEM990"
    NAME = "numbers"
    MESSAGE = "a number"
    REQUIRES = ("",)
    TORCH_ONLY = False

    def visit_Integer(self, node: cst.Integer) -> None:
        replacement = cst.Name(f"n{node.value}")
        self.report(node, fix=Fix((Replace(node, replacement),), Safety.SAFE, "name it"))


class _BreaksTheCode(Rule):
    CODE = "MEM991"
    NAME = "breaks"
    MESSAGE = "broken"
    REQUIRES = ("",)
    TORCH_ONLY = False

    def visit_Integer(self, node: cst.Integer) -> None:
        self.report(node, fix=Fix((Replace(node, cst.Name("lambda")),), Safety.SAFE, "break it"))


class _CallsAround(Rule):
    """Turns `run()` into `start()`, `run(once=True)`, `stop()` (an unsafe fix)."""

    CODE = "MEM992"
    NAME = "around"
    MESSAGE = "around"
    REQUIRES = ("",)
    TORCH_ONLY = False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        expr = node.body[0]
        if cst.Module([]).code_for_node(expr) == "run()":
            edits = (InsertBefore(node, (cst.parse_statement("start()"),)),
                     Replace(expr, cst.Expr(cst.parse_expression("run(once=True)"))),
                     InsertAfter(node, (cst.parse_statement("stop()"),)))
            self.report(node, fix=Fix(edits, Safety.UNSAFE, "wrap it"))


class _NeverDone(Rule):
    """Counts every integer up by one: its fix never makes it go away."""

    CODE = "MEM993"
    NAME = "never-done"
    MESSAGE = "count up"
    REQUIRES = ("",)
    TORCH_ONLY = False

    def visit_Integer(self, node: cst.Integer) -> None:
        bigger = cst.Integer(str(int(node.value) + 1))
        self.report(node, fix=Fix((Replace(node, bigger),), Safety.SAFE, "count up"))


def test_every_non_overlapping_fix_is_applied_and_positions_are_one_based():
    checked = check("x = 1 + 2\ny = 3\n", "t.py", [_NumbersToNames])
    assert [(f.line, f.column, f.range.end_column) for f in checked.findings] == [(1, 5, 6), (1, 9, 10), (2, 5, 6)]
    result = fix("x = 1 + 2\ny = 3\n", "t.py", [_NumbersToNames])
    assert result.source == "x = n1 + n2\ny = n3\n"
    assert len(result.applied) == 3 and result.remaining == []


def test_unsafe_fixes_need_asking_and_inserts_keep_comments_with_their_statement():
    source = "import os\n\n# run it\nrun()\n"
    assert fix(source, "t.py", [_CallsAround]).source == source
    fixed = fix(source, "t.py", [_CallsAround], unsafe=True).source
    assert fixed == "import os\n\nstart()\n# run it\nrun(once=True)\nstop()\n"


def test_the_fix_loop_is_bounded():
    result = fix("x = 0\n", "t.py", [_NeverDone])
    assert result.source == f"x = {MAX_FIX_ROUNDS}\n"
    assert len(result.applied) == MAX_FIX_ROUNDS
    assert result.remaining  # what is left is still reported


def test_a_fix_that_does_not_parse_is_refused():
    with pytest.raises(SourceError, match="does not parse"):
        fix("x = 1\n", "t.py", [_BreaksTheCode])


def test_unparsable_source_is_a_source_error():
    with pytest.raises(SourceError, match="cannot parse"):
        check("import torch\nx = (\n", "t.py", list(registry().values()))


# Invalid escapes where rules read a string's value: a device, a field of the output, a key.
_INVALID_ESCAPES = (
    'import torch\n'
    'device = torch.device("cu\\da")\n'
    'total = 0\n'
    'for x, y in loader:\n'
    '    out = model(x.to("c\\pu"))\n'
    '    loss = out["lo\\ss"] + crit(out, y)\n'
    '    loss.backward()\n'
    '    total += loss\n'
    '    print(metrics["\\d"])\n'
)


def test_warnings_turned_into_errors_do_not_stop_the_lint():
    """Under `-W error` an invalid escape's warning is raised wherever a rule evaluates the
    literal; memlint reads the file all the same, and reports what it reports without it."""
    rules = list(registry().values())
    plain = [(f.line, f.code) for f in check(_INVALID_ESCAPES, "t.py", rules).findings]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        strict = [(f.line, f.code) for f in check(_INVALID_ESCAPES, "t.py", rules).findings]
        assert fix(_INVALID_ESCAPES, "t.py", rules).source != _INVALID_ESCAPES
    assert (8, "MEM201") in plain
    assert strict == plain


def test_files_without_the_words_rules_need_are_not_parsed_by_libcst(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("parsed")

    monkeypatch.setattr(cst, "parse_module", fail)
    assert check("import numpy\nx = 1\n", "t.py", list(registry().values())).findings == []


_TEST_MODULE_LOOP = """\
import torch

def test_training_keeps_losses(model, loader, optimizer):
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss)
"""


_ABSENT_API = "    print(torch.cuda.memory_cache())\n"  # what MEM503, a rule of tests, reports


@pytest.mark.parametrize("path", ["tests/test_train.py", "pkg/tests/helpers.py", "conftest.py"])
def test_in_a_test_module_only_the_rules_of_tests_run(monkeypatch, path):
    """The other rules' reports in a test module would be dropped, so they do not run there; a
    test module that no rule of tests wants is not parsed at all. The same code in a training
    module is looked at, and reported."""
    rules = list(registry().values())
    assert {f.code for f in check(_TEST_MODULE_LOOP, "train.py", rules).findings} >= {"MEM202"}
    ran = []
    for rule in rules:
        monkeypatch.setattr(rule, "__init__", lambda self, context, code=rule.CODE: ran.append(code) or
                            Rule.__init__(self, context))
    check(_TEST_MODULE_LOOP + _ABSENT_API, path, rules)
    assert ran and all(rule.IN_TESTS for rule in rules if rule.CODE in ran)

    def fail(*args, **kwargs):
        raise AssertionError("parsed")

    outside_tests = [rule for rule in rules if not rule.IN_TESTS]
    summary = check(_TEST_MODULE_LOOP, path, outside_tests, summarize=True).summary
    assert summary is not None and "test_training_keeps_losses" in summary.functions  # a helper, summarised whole
    monkeypatch.setattr(cst, "parse_module", fail)
    assert check(_TEST_MODULE_LOOP, path, outside_tests).findings == []  # nothing to summarise: not parsed


def test_a_test_module_whose_ast_names_nothing_torch_lacks_is_not_parsed_by_libcst(monkeypatch):
    """Only MEM503 runs in a test module, and Python's own AST shows where it may report: a test
    module naming nothing torch lacks is never parsed by LibCST, and nobody importing it, its
    summary is plain (its imports and classes; its calls are not the project's steps)."""
    rules = list(registry().values())
    path = "tests/test_train.py"
    assert [f.code for f in check(_TEST_MODULE_LOOP + _ABSENT_API, path, rules).findings] == ["MEM503"]

    def fail(*args, **kwargs):
        raise AssertionError("parsed")

    monkeypatch.setattr(cst, "parse_module", fail)
    assert check(_TEST_MODULE_LOOP, path, rules).findings == []
    names = frozenset({"tests.test_train", "pkg.train"})
    alone = ProjectView(None, names, path)  # no module of the project imports it
    summary = check(_TEST_MODULE_LOOP, path, rules, project=alone, summarize=True).summary
    assert summary is not None and summary.imports == {"torch": "torch"} and not summary.functions
    imported = ProjectView(None, names, path, imported=frozenset({alone.name}))
    with pytest.raises(AssertionError, match="parsed"):  # its helpers are the others': summarised whole
        check(_TEST_MODULE_LOOP, path, rules, project=imported, summarize=True)


_DATA_TABLE = """LVIS_CATEGORIES = [
    {"id": 1, "name": "aerosol_can", "def": "a dispenser that holds a substance under pressure"},
    {"id": 2, "name": "air_conditioner", "def": "a machine that keeps air cool and dry"},
]
BY_NAME = {c["name"]: c for c in LVIS_CATEGORIES}
for c in LVIS_CATEGORIES:
    BY_NAME[c["name"]]["val"] = c["id"]
"""

_METER = """class AverageMeter:
    def __init__(self):
        self.sum = 0

    def update(self, val, n=1):
        self.sum += val * n
"""


def test_a_module_that_imports_nothing_is_not_looked_into_unless_it_defines_something(monkeypatch):
    """A source that imports nothing is no PyTorch code (`Facts.uses_torch`), so no rule runs
    there; with no function or class either (a table of data), there is nothing to summarise
    beyond it, and it is never parsed by LibCST. A meter that imports nothing but sums what it
    is given is summarised whole: another module's loop may hand it a loss."""
    rules = list(registry().values())
    names = frozenset({"lvis", "meters", "train"})  # (the modules of a folder with no `__init__.py`)
    assert wanted_rules(_DATA_TABLE, rules, "pkg/lvis.py") == []
    assert wanted_rules(_DATA_TABLE + "import torch\n", rules, "pkg/lvis.py")  # (MEM202: `] = ` in a loop)
    meters = ProjectView(None, names, "pkg/meters.py", imported=frozenset({"meters"}))
    for text in (_METER, '"""Meters."""\r' + _METER.replace("\n", "\r"), "x = 1\n\f" + _METER):  # (CR lines, a form feed)
        summary = check(text, "pkg/meters.py", rules, project=meters, summarize=True).summary
        assert summary is not None and summary.classes["AverageMeter"].methods["update"].accumulates_graph == ("val", "n")

    def fail(*args, **kwargs):
        raise AssertionError("parsed")

    monkeypatch.setattr(cst, "parse_module", fail)
    table = ProjectView(None, names, "pkg/lvis.py", imported=frozenset({"lvis"}))
    summary = check(_DATA_TABLE, "pkg/lvis.py", rules, project=table, summarize=True).summary
    assert summary is not None and not summary.functions and not summary.classes and not summary.calls
    assert check(_DATA_TABLE, "pkg/lvis.py", rules).findings == []


def test_noqa_hides_from_lint_and_fix():
    source = "x = 1  # noqa: MEM990\ny = 2  # noqa: MEM1\n"
    assert [f.line for f in check(source, "t.py", [_NumbersToNames]).findings] == [2]
    assert fix(source, "t.py", [_NumbersToNames]).source == "x = 1  # noqa: MEM990\ny = n2  # noqa: MEM1\n"


def test_choosing_fixes_for_a_round_grows_with_their_number_not_its_square(monkeypatch):
    from memlint.findings import Range

    compared = {"pairs": 0}
    overlaps = Range.overlaps

    def counted(self, other):
        compared["pairs"] += 1
        return overlaps(self, other)

    monkeypatch.setattr(Range, "overlaps", counted)
    counts = []
    for lines in (50, 200):
        compared["pairs"] = 0
        result = fix("".join(f"x{i} = {i} + {i}\n" for i in range(lines)), "t.py", [_NumbersToNames])
        assert len(result.applied) == 2 * lines and result.remaining == []
        counts.append(compared["pairs"])
    assert counts[1] <= 4 * counts[0]


_TRAINING = """
import torch

def train(model, loader, opt):
    losses = []
    for x, y in loader:
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        losses.append(loss)
    return losses
"""


_MODULE_CLASSES = """\
import torch

class Block(torch.nn.Module):
    def forward(self, x):
        return x.relu()

class Net(Block):
    pass

model = Net()
losses = []
for x, y in loader:
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    losses.append(loss)
"""


@pytest.mark.parametrize("source", [_TRAINING, _MODULE_CLASSES])
def test_a_linted_tree_is_freed_by_its_last_reference_not_by_the_cycle_collector(source):
    import gc

    rules = list(registry().values())
    assert check(source, "t.py", rules).findings  # rules and facts did run and report
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        checked = check(source, "t.py", rules)
        del checked
        gc.collect()
        left_to_the_collector = [o for o in gc.garbage if isinstance(o, cst.CSTNode)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left_to_the_collector == []


class _SeesTheCollector(Rule):
    """Records, at each call, how many objects are frozen out of the cycle collector."""

    CODE = "MEM993"
    NAME = "collector"
    MESSAGE = "seen"
    REQUIRES = ("",)
    TORCH_ONLY = False
    frozen_counts: list = []

    def visit_Call(self, node: cst.Call) -> None:
        import gc

        self.frozen_counts.append(gc.get_freeze_count())


def test_the_tree_is_out_of_the_cycle_collectors_reach_while_rules_run_and_back_after(monkeypatch):
    import gc

    monkeypatch.setattr(_SeesTheCollector, "frozen_counts", [])
    source = "f(1)\n" * 200
    check(source, "t.py", [_SeesTheCollector])
    assert len(_SeesTheCollector.frozen_counts) == 200
    assert min(_SeesTheCollector.frozen_counts) > 200 * 3  # each line's Call, Name, Arg, Integer at least
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_no_collection_runs_over_a_freshly_parsed_tree():
    """The collector is off while the tree is made; were it turned on before the tree is
    frozen, its next run (due at once) would traverse every node of it."""
    import gc

    source = "import torch\n" + "".join(f"x{i} = f(a, b[{i}], c.d)\n" for i in range(1000))  # 15,000 nodes
    seen: list = []

    def record(phase: str, info: dict) -> None:
        if phase == "start":  # every run traverses the youngest generation, where a new tree would be
            seen.append(len(gc.get_objects(generation=0)))

    gc.collect()
    gc.callbacks.append(record)
    try:
        check(source, "t.py", list(registry().values()))
    finally:
        gc.callbacks.remove(record)
    assert max(seen, default=0) < 3000, seen


def test_a_host_that_manages_the_collector_itself_is_left_alone(monkeypatch):
    import gc

    monkeypatch.setattr(_SeesTheCollector, "frozen_counts", [])
    gc.freeze()  # the host's own frozen objects (as a pre-fork server keeps them)
    try:
        hosts = gc.get_freeze_count()
        check("f(1)\n", "t.py", [_SeesTheCollector])
        assert _SeesTheCollector.frozen_counts == [hosts] and gc.get_freeze_count() == hosts
        gc.disable()
        check("f(1)\n", "t.py", [_SeesTheCollector])
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_handlers_see_the_visited_node_and_its_ancestors():
    seen = []

    class _Ancestry(Rule):
        CODE = "MEM994"
        NAME = "ancestry"
        MESSAGE = "here"
        REQUIRES = ("",)
        TORCH_ONLY = False

        def visit_Integer(self, node: cst.Integer) -> None:
            chain = self.context.ancestors
            seen.append((type(chain[0]).__name__, chain[-1] is node, self.context.scope(), self.context.statement()))
            self.report(node)

    checked = check("def f():\n    return [1]\n", "t.py", [_Ancestry])
    (module_first, ends_at_node, scope, statement), = seen
    assert module_first == "Module" and ends_at_node
    assert isinstance(scope, cst.FunctionDef) and scope.name.value == "f"
    assert isinstance(statement, cst.SimpleStatementLine)
    assert [(f.line, f.statement_line) for f in checked.findings] == [(2, 2)]


def test_leave_handlers_run_after_the_nodes_subtree_innermost_first():
    events = []

    class _Nesting(Rule):
        CODE = "MEM995"
        NAME = "nesting"
        MESSAGE = "here"
        REQUIRES = ("",)
        TORCH_ONLY = False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            events.append(f"enter {node.name.value}")

        def visit_Integer(self, node: cst.Integer) -> None:
            events.append(f"number {node.value}")

        def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
            assert self.context.ancestors[-1] is node
            events.append(f"leave {node.name.value}")

    check("def f():\n    def g():\n        return 1\n    return 2\ndef h():\n    return 3\n", "t.py", [_Nesting])
    assert events == ["enter f", "enter g", "number 1", "leave g", "number 2", "leave f",
                      "enter h", "number 3", "leave h"]
