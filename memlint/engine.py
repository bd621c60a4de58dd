"""Parse once, run every selected rule in one traversal, position what they report, fix.

Speed comes from doing little: a file that never mentions what any rule needs is not parsed,
nor a test module where Python's own AST shows that no rule of tests can report (Rule.may_report);
the walk skips formatting nodes (memlint.analysis.tree); facts are computed only when a rule
asks (memlint.analysis); positions are computed only for files with something to report.
"""

from __future__ import annotations

import ast
import difflib
import io
import re
import sys
import warnings
from collections import Counter
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Callable, Dict, FrozenSet, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Type, Union

import libcst as cst
from libcst.metadata import CodeRange

from memlint.analysis import Facts
from memlint.analysis.project import ProjectView
from memlint.analysis.summary import ModuleSummary, summarize as summary_of, summarize_plain
from memlint.analysis.testcode import holds_only_tests, is_test_file
from memlint.analysis.tree import index
from memlint.collector import kept_from_collector, paused
from memlint.edits import apply_edits
from memlint.fixdiff import regional_diff
from memlint.positions import Positions, split_lines
from memlint.findings import Edit, Finding, Fix, Range, Remove, Replace, Safety
from memlint.profile import Timer, timed
from memlint.rule import Rule
from memlint.suppressions import Suppressions
from memlint.trusted_nodes import trusted_nodes
from memlint.torch_target import TorchVersion

MAX_FIX_ROUNDS = 10
SYNTAX = f"Python {sys.version_info[0]}.{sys.version_info[1]}"  # the grammar files are held to


class SourceError(Exception):
    """The source cannot be linted (it does not parse); the message is one line."""


class TooDeep(SourceError):
    """The code nests deeper than memlint's analysis can follow: skipped with a warning."""


# Python frames the analysis of the deepest code the syntax gate passes needs: LibCST prints and
# transforms a tree recursively, two or three frames per level of nesting, and CPython 3.11
# compiles up to three times its recursion limit (1,000) in levels: 9,000 measured, 15,000 held.
ANALYSIS_FRAMES = 15_000


@contextmanager
def _warnings_ignored() -> Iterator[None]:
    """Warnings raised while a source is compiled or analysed are not memlint's to report:
    an invalid escape in a string literal warns whenever LibCST evaluates the literal, and
    under `-W error` (PYTHONWARNINGS=error, as some CI sets) that warning would be raised
    out of whichever rule asked for the literal's value."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextmanager
def _deep_enough() -> Iterator[None]:
    """Python's recursion limit raised to ANALYSIS_FRAMES while a tree is analysed, printed or
    fixed (a `+` chain of 500 terms is already too deep for the default), never while the
    syntax gate compiles: the gate's own depth follows that limit. A RecursionError past it
    becomes TooDeep."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, ANALYSIS_FRAMES))
    try:
        yield
    except RecursionError:
        raise TooDeep("not linted: its code nests too deeply for memlint's analysis") from None
    finally:
        sys.setrecursionlimit(limit)


@dataclass
class _Report:
    rule: Rule
    node: cst.CSTNode
    statement: cst.CSTNode
    message: str
    fix: Optional[Fix]


class FileContext:
    """What a rule sees while the tree is walked: the facts, the node being visited and its
    ancestors, and the oldest torch the project supports (`target_torch`; None: no constraint)."""

    def __init__(self, module: cst.Module, target_torch: Optional[TorchVersion] = None,
                 project: Optional[ProjectView] = None, path: str = "") -> None:
        self.module = module
        self.target_torch = target_torch
        self.facts = Facts(module, index(module), project, path)
        self.node: cst.CSTNode = module  # the node being visited
        self.reports: List[_Report] = []

    def _outward(self) -> Iterator[cst.CSTNode]:
        """The current node, then its ancestors up to the module."""
        yield self.node
        yield from self.facts.tree.ancestors(self.node)

    @property
    def ancestors(self) -> List[cst.CSTNode]:
        """From the module down to the current node (found when asked: few handlers ask, and
        keeping the list current for every node walked cost more than all the asking)."""
        chain = list(self._outward())
        chain.reverse()
        return chain

    def statement(self) -> cst.CSTNode:
        """The innermost whole statement around the current node."""
        return self.facts.tree.statement_around(self.node) or self.module

    def scope(self) -> cst.CSTNode:
        """The function (or the module) the current node runs in."""
        for node in self._outward():
            if isinstance(node, (cst.FunctionDef, cst.Lambda)):
                return node
        return self.module

    def report(self, rule: Rule, node: cst.CSTNode, message: str, fix: Optional[Fix]) -> None:
        """Record a finding, its message on one line; a fix that needs a newer torch than the
        target is not offered, and the message says so."""
        target = self.target_torch
        if "\n" in message or "\r" in message:  # one line per finding, whatever code a message quotes
            message = " ".join(part.strip() for part in message.splitlines() if part.strip())
        if fix is not None and fix.min_torch is not None and target is not None and target < fix.min_torch:
            message = f"{message} (fix not offered: needs torch >= {fix.min_torch}, project targets {target})"
            fix = None
        self.reports.append(_Report(rule, node, self.statement(), message, fix))

    def close(self) -> None:
        """Drop the facts, the rules and their reports. They refer to one another (a report
        names its rule, a rule its context) and the facts to each other, so without this they
        would be reference cycles holding the whole tree, freed only by CPython's cycle
        collector, which rescans every live object to find them; closed, a file's tree is freed
        the moment the last reference to it goes."""
        self.facts.release()
        self.reports.clear()
        self.node = self.module


Handler = Callable[[cst.CSTNode], object]


@lru_cache(maxsize=None)
def _handled(rule_type: type, prefix: str) -> Tuple[Tuple[type, str], ...]:
    """The node types a rule class handles with methods named `prefix` + type (found once per class)."""
    found = []
    for attr in dir(rule_type):
        if attr.startswith(prefix):
            node_type = getattr(cst, attr[len(prefix):], None)
            if not isinstance(node_type, type):
                raise TypeError(f"{rule_type.__name__}.{attr}: no LibCST node {attr[len(prefix):]}")
            found.append((node_type, attr))
    return tuple(found)


def _handlers(rules: Sequence[Rule], prefix: str, timer: Optional[Timer]) -> Dict[type, List[Handler]]:
    table: Dict[type, List[Handler]] = {}
    for rule in rules:
        for node_type, attr in _handled(type(rule), prefix):
            handler = getattr(rule, attr)
            if timer is not None:
                handler = timed(handler, f"rule {rule.CODE}", timer)
            table.setdefault(node_type, []).append(handler)
    return table


def _dispatch(context: FileContext, handlers: List[Handler], node: cst.CSTNode) -> None:
    context.node = node
    for handler in handlers:
        handler(node)


def _walk(context: FileContext, rules: Sequence[Rule], timer: Optional[Timer] = None) -> None:
    """Dispatch every node of the file's tree index to the rules that handle its type (the
    visits dispatched in the loop itself: half a million calls fewer over a large corpus)."""
    enter = _handlers(rules, "visit_", timer)
    leave = _handlers(rules, "leave_", timer)
    tree = context.facts.tree
    if not leave:  # (no rule of memlint's leaves a node: one look-up a node, no subtrees to follow)
        handled = enter.get
        for node in tree.nodes:
            handlers = handled(type(node))
            if handlers is not None:
                context.node = node
                for handler in handlers:
                    handler(node)
        return
    pending: List[Tuple[cst.CSTNode, int]] = []  # nodes with leave handlers, not yet left, with their subtree's end
    ends = tree.ends
    for position, node in enumerate(tree.nodes):
        while pending and pending[-1][1] <= position:
            left = pending.pop()[0]
            _dispatch(context, leave[type(left)], left)
        node_type = type(node)
        if node_type in enter:
            context.node = node
            for handler in enter[node_type]:
                handler(node)
        if node_type in leave:
            pending.append((node, ends[position]))
    while pending:
        left = pending.pop()[0]
        _dispatch(context, leave[type(left)], left)


@dataclass
class Checked:
    """One lint of one source: its tree, what was found (suppressions applied), node positions."""

    source: str
    module: Optional[cst.Module]
    findings: List[Finding]
    positions: Union[Positions, Mapping[cst.CSTNode, CodeRange]] = field(default_factory=dict)
    parents: Mapping[int, cst.CSTNode] = field(default_factory=dict)  # id(node) -> its parent
    asked: Dict[str, object] = field(default_factory=dict)  # what the rules asked of the project, and heard
    summary: Optional[ModuleSummary] = None  # the module's summary, when asked for

    @cached_property
    def lines(self) -> List[str]:
        return split_lines(self.source)


def compiles(source: str, path: str) -> None:
    """The syntax gate, one rule for every file: what the running Python compiles. LibCST's
    parser alone accepts code CPython rejects (1,000 nested brackets, newer grammar), and such
    a file must neither pass as clean nor be rewritten. Compiling costs a tenth of a LibCST parse."""
    with _python_verdict():
        compile(source, path, "exec", _grammar(path), dont_inherit=True)


def _grammar(path: str) -> int:
    """The compile flags of the code at `path`: a notebook's cells may `await` (and `async for`,
    `async with`) at their top level, which Jupyter runs in its event loop and plain Python
    rejects; anywhere else, none."""
    return ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if path.endswith(".ipynb") else 0


def compiles_to_ast(source: str, path: str) -> Optional[ast.Module]:
    """The syntax gate of `compiles`, keeping Python's own AST on the way: the AST, then the
    code compiled from it, which raises what compiling the source would (a `return` outside a
    function is found past the parser). Python's AST objects nest no deeper than its recursion
    limit, where compiling the text goes deeper: past it, the text is compiled and no AST is
    kept (None)."""
    with _python_verdict():
        try:
            module = compile(source, path, "exec", ast.PyCF_ONLY_AST | _grammar(path), dont_inherit=True)
            compile(module, path, "exec", _grammar(path), dont_inherit=True)
        except RecursionError:
            compile(source, path, "exec", _grammar(path), dont_inherit=True)
            return None
        return module


@contextmanager
def _python_verdict() -> Iterator[None]:
    """What Python says of a source it compiles inside, as memlint's one-line error
    (SourceError); its SyntaxWarnings are not memlint's to report."""
    try:
        with _warnings_ignored():
            yield
    except SyntaxError as error:
        where = f" (line {error.lineno}, column {error.offset})" if error.lineno else ""
        raise SourceError(f"cannot parse as {SYNTAX}: {error.msg}{where}") from None
    except (ValueError, RecursionError, MemoryError) as error:
        raise SourceError(f"cannot parse as {SYNTAX}: {why_not_compiled(error)}") from None


def why_not_compiled(error: Exception) -> str:
    """The reason, in one line, for an error that compile() or ast.parse() raise besides SyntaxError
    (a MemoryError says nothing of itself)."""
    if isinstance(error, MemoryError):
        return "out of memory (the file is too large or nested too deep)"
    if isinstance(error, RecursionError):
        return "nesting too deep"
    return str(error) or type(error).__name__


def parse(source: str) -> cst.Module:
    """The LibCST tree of a source that already compiles."""
    try:
        with trusted_nodes(), paused():
            module = cst.parse_module(source)
        if source.endswith("\r") and not module.has_trailing_newline:  # LibCST takes a final lone
            module = module.with_changes(has_trailing_newline=True)  # CR for none, and drops it
        return module
    except cst.ParserSyntaxError as error:
        raise SourceError(
            f"cannot parse: {SYNTAX} accepts this file but memlint's parser does not: {error.message} "
            f"(line {error.raw_line}, column {error.raw_column + 1})"
        ) from None
    except RecursionError:  # a MemoryError is no fact of the source: the worker's budget ran out
        raise SourceError("cannot parse: nesting too deep for memlint's parser") from None


def wanted_rules(source: str, rule_types: Sequence[Type[Rule]], path: str = "") -> List[Type[Rule]]:
    """The rules that could find something in `source`: it has a word each needs, and, in a
    test module (`path`), the rule reports in tests at all; in a source that imports nothing,
    only a rule not kept to PyTorch code (memlint.analysis.Facts.uses_torch: what a module, or
    a module of the project it imports, imports). The others' reports there would be dropped
    (`_report`), so a test module that no rule of tests wants is never parsed: a sixth of a
    real project's lines are its tests'; nor is a table of data (detectron2's LVIS categories,
    a fifth of a megabyte of literals each)."""
    test_module = bool(path) and is_test_file(path)
    imports = "import" in source
    return [r for r in rule_types if (r.IN_TESTS or not test_module) and (imports or not r.TORCH_ONLY)
            and any(word in source for word in r.REQUIRES)]


@lru_cache(maxsize=1)
def _summary_words() -> FrozenSet[str]:
    """The words any rule needs (`Rule.REQUIRES`), selected or not."""
    from memlint.rules import registry
    return frozenset(word for rule in registry().values() for word in rule.REQUIRES)


def _worth_summarizing(source: str) -> bool:
    """Whether a module's summary may say more than its imports and classes: it has a word
    some rule needs, and a function, a class or an import (what the summary tells of: a module
    of nothing but statements on literals and builtins calls nothing of the project's, and
    defines nothing another module calls). Asked of every rule, not the selected ones, so that
    what the project knows of a module (a meter in a file that never names torch, summing what
    it is given) is the same whatever a run selects."""
    return any(word in source for word in _summary_words()) and ("import" in source or bool(_DEFINES.search(source)))


# a line that starts a function or a class (a compound statement starts its line, after any
# indentation Python takes, form feeds too; a line may end in a lone CR); a table of data spells
# `"def": ...` in every entry
_DEFINES = re.compile(r"(?:^|\r)[ \t\f]*(?:(?:async[ \t\f]+)?def|class)[ \t\f]", re.MULTILINE)


def check(source: str, path: str, rule_types: Sequence[Type[Rule]],
          target_torch: Optional[TorchVersion] = None, timer: Optional[Timer] = None, *,
          compiled: bool = False, project: Optional[ProjectView] = None, summarize: bool = False,
          noqa: bool = True) -> Checked:
    """Lint one source with the given rules, offering only fixes that run on `target_torch`
    (`timer`: charge the work to phases, rules and facts). `compiled`: the caller has already
    had CPython parse this very source (flake8 has), so the syntax gate is not run again.
    `project`: what the other modules of its project say (memlint.analysis.project; a fresh
    view per call, which records the questions asked); `summarize`: also summarise the module
    for the others (memlint.analysis.summary). `noqa`: honour `# noqa` comments (flake8's
    --disable-noqa turns them off)."""
    if project is None:
        project = ProjectView()
    if timer is None:
        return _check(source, path, rule_types, target_torch, None, compiled, project, summarize, noqa)
    with timer.active():
        return _check(source, path, rule_types, target_torch, timer, compiled, project, summarize, noqa)


def _check(source: str, path: str, rule_types: Sequence[Type[Rule]], target_torch: Optional[TorchVersion],
           timer: Optional[Timer], compiled: bool, project: ProjectView, summarize: bool,
           noqa: bool = True) -> Checked:
    clock = timer.phase if timer is not None else nullcontext
    wanted = wanted_rules(source, rule_types, path)
    test_module = bool(path) and is_test_file(path)
    python_ast: Optional[ast.Module] = None
    if not compiled:
        with clock("compile"):
            if test_module:  # only rules of tests run there, which may tell from the AST alone
                python_ast = compiles_to_ast(source, path)
                if python_ast is not None:
                    wanted = [rule for rule in wanted if rule.may_report(python_ast)]
            else:
                compiles(source, path)
    # A module of tests alone that no other module imports is summarised plain (its imports and
    # classes): its loops are not the project's steps, its saves not the project's checkpoints.
    # One that is imported holds helpers, summarised whole; so is a script named `*_test.py`.
    plain = python_ast is not None and holds_only_tests(path) and not project.imported
    if not wanted and not (summarize and not plain and _worth_summarizing(source)):
        # nothing to look for (it compiles, that is all to check), nor to summarise for the
        # others beyond its imports and classes
        return Checked(source, None, [], summary=summarize_plain(python_ast or source, project.name, project.package)
                       if summarize else None)
    with kept_from_collector() as settle, _deep_enough(), _warnings_ignored():
        with clock("parse"):
            module = parse(source)
        settle()
        with clock("index"):
            context = FileContext(module, target_torch, project, path)
        try:
            checked = _report(context, source, path, wanted, timer, noqa) if wanted else Checked(source, module, [])
            checked.asked = dict(project.asked)  # the rules' questions, not the summary's
            if summarize:
                with clock("summary"):
                    checked.summary = summarize_plain(python_ast or source, project.name, project.package) \
                        if plain else summary_of(context.facts, project.imported, python_ast or source)
            return checked
        finally:
            context.close()


def _report(context: FileContext, source: str, path: str, wanted: Sequence[Type[Rule]],
            timer: Optional[Timer], noqa: bool = True) -> Checked:
    """Walk the rules over the context's tree, and place and filter what they report."""
    clock = timer.phase if timer is not None else nullcontext
    module = context.module
    with clock("walk"):  # the dispatch itself; rules and facts are charged on their own
        _walk(context, [rule_type(context) for rule_type in wanted], timer)
    if context.reports and (context.facts.test_file or not context.facts.uses_torch):
        facts = context.facts  # tests, and code that is not PyTorch: only the rules meant for them
        context.reports[:] = [report for report in context.reports if (report.rule.IN_TESTS or not facts.test_file)
                              and (not report.rule.TORCH_ONLY or facts.uses_torch)]
    if not context.reports:
        return Checked(source, module, [])
    parents = context.facts.tree.parents
    positions = Positions(module, source, parents)
    suppressions = Suppressions(source if noqa else "")
    findings = []
    for report in context.reports:
        with clock("positions"):
            where = positions[report.node]
            statement_line = positions[report.statement].start.line
        finding = Finding(
            code=report.rule.CODE,
            name=report.rule.NAME,
            message=report.message,
            path=path,
            range=Range(where.start.line, where.start.column + 1, where.end.line, where.end.column + 1),
            statement_line=statement_line,
            fix=report.fix,
        )
        if not suppressions.hides(finding):
            findings.append(finding)
    findings.sort(key=lambda f: (f.line, f.column, f.code))
    return Checked(source, module, findings, positions, parents)


def fix_allowed(fix: Optional[Fix], unsafe: bool) -> bool:
    return fix is not None and (fix.safety is Safety.SAFE or unsafe)


def _edit_range(edit: Edit, positions: Mapping[cst.CSTNode, CodeRange]) -> Tuple[bool, Range]:
    node = edit.target if isinstance(edit, (Replace, Remove)) else edit.anchor
    where = positions[node]
    return isinstance(edit, (Replace, Remove)), Range(where.start.line, where.start.column,
                                            where.end.line, where.end.column)


class _Taken:
    """The edits of the fixes chosen for one round, filed by line. A fix can join unless one of
    its replacements overlaps anything taken, or anything of it overlaps a taken replacement;
    each check looks only at the lines the fix spans, so a round costs what its fixes span,
    not the square of their number."""

    def __init__(self, positions: Mapping[cst.CSTNode, CodeRange]) -> None:
        self._positions = positions
        self._replaced: Dict[int, List[Range]] = {}
        self._touched: Dict[int, List[Range]] = {}
        self._fixes: Set[int] = set()  # ids of the fixes taken (findings may share one fix)

    def admits(self, fix: Fix) -> bool:
        if id(fix) in self._fixes:
            return False  # already taken for another finding: it is made, not made twice
        for replaces, where in (_edit_range(edit, self._positions) for edit in fix.edits):
            for line in range(where.line, where.end_line + 1):
                if any(where.overlaps(other) for other in self._replaced.get(line, ())):
                    return False
                if replaces and any(where.overlaps(other) for other in self._touched.get(line, ())):
                    return False
        return True

    def take(self, fix: Fix) -> None:
        self._fixes.add(id(fix))
        for replaces, where in (_edit_range(edit, self._positions) for edit in fix.edits):
            for line in range(where.line, where.end_line + 1):
                self._touched.setdefault(line, []).append(where)
                if replaces:
                    self._replaced.setdefault(line, []).append(where)


def verified_code(module: cst.Module, path: str) -> str:
    """The module's code, if it is still valid Python; else SourceError (nothing gets written)."""
    code = module.code
    try:
        compiles(code, path)
        parse(code)
    except SourceError as error:
        raise SourceError(f"a fix produced code that does not parse ({error}); nothing written") from None
    return code


def apply_fixes(checked: Checked, fixes: Sequence[Fix], path: str) -> str:
    assert checked.module is not None
    edits = [edit for fix in fixes for edit in fix.edits]
    return verified_code(apply_edits(checked.module, edits), path)


@dataclass
class FixResult:
    source: str  # the fixed source (unchanged when nothing applied)
    applied: List[Finding]  # findings whose fixes were applied, in the round they were found
    remaining: List[Finding]  # what a lint of the fixed source still reports
    asked: Dict[str, object] = field(default_factory=dict)  # what the rules asked of the project, every round


def _edit_key(edit: Edit, module: cst.Module) -> Tuple[object, ...]:
    """What an edit does, comparable across fixes: the node it acts on (by identity) and the code it puts."""
    if isinstance(edit, Replace):
        return ("replace", id(edit.target), module.code_for_node(edit.replacement))
    if isinstance(edit, Remove):
        return ("remove", id(edit.target))
    return (type(edit).__name__, id(edit.anchor), tuple(module.code_for_node(s) for s in edit.statements))


def _fixed_along(checked: Checked, chosen: Sequence[Finding]) -> List[Finding]:
    """Findings not chosen whose every edit a chosen fix makes too (one import rewrite serving two
    deprecated calls): they are fixed as well, and counted, since the count is of findings. A fix
    object several findings share is judged once."""
    assert checked.module is not None
    module = checked.module
    made = {_edit_key(edit, module) for finding in chosen for edit in finding.fix.edits}  # type: ignore[union-attr]
    picked = {id(f) for f in chosen}
    verdicts: Dict[int, bool] = {id(f.fix): True for f in chosen}
    along = []
    for finding in checked.findings:
        if id(finding) in picked or finding.fix is None:
            continue
        key = id(finding.fix)
        if key not in verdicts:
            verdicts[key] = all(_edit_key(edit, module) in made for edit in finding.fix.edits)
        if verdicts[key]:
            along.append(finding)
    return along


def fix(source: str, path: str, rule_types: Sequence[Type[Rule]], unsafe: bool = False,
        target_torch: Optional[TorchVersion] = None, timer: Optional[Timer] = None,
        project: Optional[ProjectView] = None) -> FixResult:
    """Apply fixes until nothing changes (at most MAX_FIX_ROUNDS rounds)."""
    clock = timer.phase if timer is not None else nullcontext
    applied: List[Finding] = []
    view = project.fresh() if project is not None else ProjectView()
    checked = check(source, path, rule_types, target_torch, timer, project=view)  # the syntax gate at the caller's limit
    with _deep_enough():
        for _ in range(MAX_FIX_ROUNDS):
            chosen: List[Finding] = []
            taken = _Taken(checked.positions)  # type: ignore[arg-type]
            for finding in checked.findings:
                if fix_allowed(finding.fix, unsafe) and taken.admits(finding.fix):  # type: ignore[arg-type]
                    taken.take(finding.fix)  # type: ignore[arg-type]
                    chosen.append(finding)
            if not chosen:
                break
            with clock("fix"):
                new_source = apply_fixes(checked, [f.fix for f in chosen], path)  # type: ignore[misc]
            if new_source == checked.source:
                break
            along = _fixed_along(checked, chosen)
            applied.extend(chosen)
            applied.extend(along)
            settled = {id(f) for f in (*chosen, *along)}
            left = [f for f in checked.findings if id(f) not in settled]
            checked = check(new_source, path, rule_types, target_torch, timer, project=view)
            applied.extend(_gone(left, checked.findings))
    return FixResult(checked.source, applied, checked.findings, view.asked)


def _gone(before: Sequence[Finding], after: Sequence[Finding]) -> List[Finding]:
    """Findings a round left alone that are gone once its fixes are made (MEM201 and MEM202
    inside the `no_grad` block MEM203's fix adds): the fixes removed them, so they count as
    fixed, and `memlint` and `memlint --fix` count alike. Matched by code, as lines move."""
    still = Counter(f.code for f in after)
    gone = []
    for finding in before:
        if still[finding.code]:
            still[finding.code] -= 1
        else:
            gone.append(finding)
    return gone


def fix_diff(checked: Checked, finding: Finding, path: str, timer: Optional[Timer] = None) -> str:
    """The unified diff of one finding's fix alone, made from the statements it edits (the
    whole file only when those cannot be told apart). Not checked to parse: it shows what the
    fix would write, and --fix is what refuses to write code that does not parse."""
    assert finding.fix is not None and checked.module is not None
    with timer.phase("fix diffs") if timer is not None else nullcontext(), _deep_enough():
        diff = regional_diff(checked.module, checked.lines, finding.fix, checked.parents,
                             checked.positions, diff_header(path))
        if diff is None:
            diff = unified_diff(checked.source, apply_edits(checked.module, finding.fix.edits).code, path)
        return diff


def diff_header(path: str) -> str:
    """The first two lines of a unified diff of `path` (as unified_diff writes them)."""
    return f"--- a/{path}\n+++ b/{path}\n"


def unified_diff(before: str, after: str, path: str) -> str:
    """A unified diff that `patch` and `git apply` accept, also for a last line without newline.
    Lines are split where Python splits them (not at form feeds, as str.splitlines does)."""
    lines = []
    for line in difflib.unified_diff(
        list(io.StringIO(before, newline="")), list(io.StringIO(after, newline="")),
        fromfile=f"a/{path}", tofile=f"b/{path}",
    ):
        lines.append(line)
        if not line.endswith(("\n", "\r")):
            lines.append("\n\\ No newline at end of file\n")
    return "".join(lines)
