"""A run over paths: find the files, read each, lint or fix it, write fixes back.

Errors are per file (a missing path, an unreadable or unparsable file): they are collected
with the findings of the other files, never raised, so one bad file does not stop the run.

Fixes are made where files are linted (worker processes) and written here, in the run's own
process, as each file's result comes in: a file is written only if it still holds what was
read, a write is not cut short by Ctrl-C or SIGTERM, and a run stopped midway (Interrupted)
names the files it rewrote.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple, Type

from memlint.analysis.project import (Project, ProjectView, imported_modules, module_name, namespace_names,
                                      project_files, same_answers)
from memlint.analysis.summary import ModuleSummary
from memlint.analysis.testcode import is_test_file
from memlint.cache import Cache, Entry, file_key, text_digest
from memlint.config import AnyConfig, forget_folders
from memlint.engine import (SourceError, TooDeep, apply_fixes, check, diff_header, fix, fix_allowed, fix_diff,
                            unified_diff)
from memlint.files import BadPath, discover
from memlint.findings import Finding
from memlint.interrupts import Interrupted, held
from memlint.jobs import map_in_order, memory_budget
from memlint.notebook import Notebook, NotebookError, is_notebook, read_source
from memlint.profile import Timer
from memlint.rule import Rule
from memlint.sourcefile import FileChanged, SourceText, TooLarge, UnreadableFile, digest, read, write_back
from memlint.suppressions import unknown_codes
from memlint.torch_target import TorchVersion
from memlint.trusted_nodes import unguard


@dataclass
class Options:
    fix: bool = False  # apply fixes and write them
    diff: bool = False  # compute what --fix would change, write nothing
    unsafe_fixes: bool = False
    fix_diffs: bool = False  # a diff per finding's fix (for JSON output)
    force_exclude: bool = False  # `exclude` applies to files named on the command line too
    jobs: int = 1  # processes to lint in
    cache: Optional[Cache] = None  # results of earlier runs; None: lint every file
    profile: bool = False  # time each phase, rule and fact
    file_timeout: float = 0.0  # seconds of CPU time a file may take (0: no limit)
    require_files: bool = True  # the paths were named: a folder without a Python file is an error
    in_memory: bool = False  # a text not read from its file (stdin, an editor's buffer): never written
    memory_budget: Optional[int] = None  # bytes a worker may use (None: its share, memlint.jobs.memory_budget)


@dataclass(frozen=True)
class Rewrite:
    """A file's fixed text, to be written if the file still holds the bytes it was made from."""

    text: SourceText
    expected: str  # the digest of the bytes read (memlint.sourcefile.digest)


@dataclass
class FileOutcome:
    display: str  # the path as the user should see it
    findings: List[Finding] = field(default_factory=list)  # what remains
    fixed: List[Finding] = field(default_factory=list)  # what --fix applied (or --diff would)
    diff: str = ""  # --diff: the whole file's change
    fix_diffs: List[Optional[str]] = field(default_factory=list)  # aligned with findings
    error: Optional[str] = None
    warning: Optional[str] = None  # one line that fails nothing (a broken link in a folder, skipped)
    notes: List[Tuple[int, str]] = field(default_factory=list)  # (line, warning) about the file's text
    notebook: Optional[Notebook] = None  # for a notebook: where its cells lie in the file
    text: Optional[str] = None  # in memory, with --fix: the text the fixes make
    seconds: Dict[str, float] = field(default_factory=dict)  # --profile: time per phase, rule and fact
    asked: Dict[str, object] = field(default_factory=dict)  # what the lint asked of the project, and heard
    summary: Optional[ModuleSummary] = None  # the first phase over a project: the module's summary
    # what to cache (text, result), once the run knows it stands; the text None where it is the
    # file's as read (the run has it: a worker does not send it back)
    entry: Optional[Tuple[Optional[str], Entry]] = None
    rewrite: Optional[Rewrite] = None  # --fix: what to write, once back in the run's process


def display_path(path: Path) -> str:
    name = str(path)
    if isinstance(path, Path) and not path.is_absolute() and os.pardir not in path.parts:
        return name  # a Path is normalised: relative, without `..`, it is what relpath gives, sooner
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if relative.startswith("..") else relative


def _lint_cells(notebook: Notebook, display: str, rules: Sequence[Type[Rule]],
                options: Options, target: Optional[TorchVersion], view: ProjectView) -> FileOutcome:
    outcome = FileOutcome(display, error="; ".join(notebook.problems) or None)
    if (options.fix or options.diff) and not notebook.problems:  # a cell that does not parse: left alone
        result = fix(notebook.module, display, rules, unsafe=options.unsafe_fixes, target_torch=target, project=view)
        outcome.asked = result.asked
        fixed = notebook.updated(result.source)
        outcome.findings = [fixed.locate(f).detached() for f in result.remaining]
        outcome.fixed = [notebook.locate(f).detached() for f in result.applied]
        if fixed.text != notebook.text:
            if options.diff:
                outcome.diff = unified_diff(notebook.text, fixed.text, display)
            elif options.in_memory:
                outcome.text = fixed.text
            else:  # its encoding, UTF-8, gives back the bytes it was read from
                outcome.rewrite = Rewrite(SourceText(fixed.text, notebook.encoding),
                                          digest(notebook.text.encode(notebook.encoding)))
        outcome.notebook = fixed
        return outcome
    checked = check(notebook.module, display, rules, target, project=view)
    outcome.asked = checked.asked
    outcome.findings = [notebook.locate(f).detached() for f in checked.findings]
    if options.fix_diffs:
        outcome.fix_diffs = [
            unified_diff(notebook.text, notebook.updated(apply_fixes(checked, [f.fix], display)).text, display)
            if f.fix is not None else None
            for f in checked.findings
        ]
    outcome.notebook = notebook
    return outcome


def _lint_notebook(source: SourceText, display: str, rules: Sequence[Type[Rule]], options: Options,
                   target: Optional[TorchVersion], view: ProjectView) -> FileOutcome:
    """A notebook's code cells (`source`: its JSON text), linted (or fixed) as one module;
    findings located by cell."""
    notebook = Notebook.from_text(source.text, source.encoding)
    try:
        return _lint_cells(notebook, display, rules, options, target, view)
    except SourceError:
        parsable = notebook.without_unparsable_cells()  # cells CPython accepts and LibCST does not
        if parsable is notebook:
            raise
        return _lint_cells(parsable, display, rules, options, target, view)


@dataclass(frozen=True)
class _Task:
    """One file to lint or fix, with its text already read (a worker process needs no more).
    `summarize`: the first phase of a run over a project (memlint.analysis.project): lint
    without the other modules' summaries, which are not known yet, and summarise this one.
    `compiled`: the first phase already put this very text through the syntax gate (a module
    linted again in the second phase), which is not run again."""

    path: Path
    display: str
    rules: Tuple[Type[Rule], ...]
    source: SourceText
    options: Options
    target: Optional[TorchVersion]  # the oldest torch its fixes must run on
    summarize: bool = False
    compiled: bool = False


def _fix_file(task: _Task, source: SourceText, outcome: FileOutcome, timer: Optional[Timer],
              view: ProjectView) -> None:
    options = task.options
    result = fix(source.text, task.display, task.rules, unsafe=options.unsafe_fixes, target_torch=task.target,
                 timer=timer, project=view)
    outcome.findings = [f.detached() for f in result.remaining]
    outcome.fixed = [f.detached() for f in result.applied]
    outcome.asked = result.asked
    if result.source == source.text:
        outcome.entry = (None, Entry(outcome.findings, asked=result.asked))
    elif options.diff:
        outcome.diff = unified_diff(source.text, result.source, task.display)
    elif options.in_memory:
        outcome.text = result.source
    else:
        outcome.rewrite = Rewrite(SourceText(result.source, source.encoding), source.digest)


def _lint(task: _Task, project: Optional[Project] = None, names: FrozenSet[str] = frozenset(),
          imported: FrozenSet[str] = frozenset(), device_imported: FrozenSet[str] = frozenset()) -> FileOutcome:
    """Lint or fix one file (in a worker process, or here), knowing what `project` says of
    the other modules (`names`: those of the project's modules; `imported`: those the others
    import; `device_imported`: those that files which may name a device import). What the lint found of the text as it is goes with the outcome (`entry`), for the
    run to cache once it knows that it stands. Never raises: a bug of memlint's becomes one
    line for this file, and the run goes on."""
    outcome = FileOutcome(task.display)
    timer = Timer() if task.options.profile else None
    source = task.source
    fixing = task.options.fix or task.options.diff
    view = ProjectView(project, names, str(task.path), imported, device_imported)
    try:
        if is_notebook(task.path):
            outcome = _lint_notebook(source, task.display, task.rules, task.options, task.target, view)
            if not outcome.diff and outcome.text is None and outcome.rewrite is None:  # the text as it is
                diffs = outcome.fix_diffs if task.options.fix_diffs and not fixing else None
                outcome.entry = (None, Entry(outcome.findings, outcome.error, diffs, outcome.asked,
                                                    notebook=True))
        elif fixing and not task.summarize:
            _fix_file(task, source, outcome, timer, view)
        else:
            checked = check(source.text, task.display, task.rules, task.target, timer, project=view,
                            summarize=task.summarize, compiled=task.compiled)
            outcome.findings = [f.detached() for f in checked.findings]
            outcome.asked, outcome.summary = checked.asked, checked.summary
            if task.options.fix_diffs:
                diffs: Dict[int, str] = {}  # findings that share one fix share its diff
                for f in checked.findings:
                    if f.fix is not None and id(f.fix) not in diffs:
                        diffs[id(f.fix)] = fix_diff(checked, f, task.display, timer)
                outcome.fix_diffs = [diffs[id(f.fix)] if f.fix is not None else None for f in checked.findings]
            outcome.entry = (None, Entry(outcome.findings, diffs=outcome.fix_diffs if task.options.fix_diffs
                                                else None, asked=checked.asked))
    except NotebookError as error:  # a fact of the text, fixed or not
        outcome.error = str(error)
        outcome.entry = (None, Entry([], error=outcome.error))
    except TooDeep as error:  # valid code memlint cannot follow: skipped, as a file over its time budget
        outcome.warning = str(error)
    except SourceError as error:
        outcome.error = str(error)
        if task.summarize:
            outcome.summary = ModuleSummary.empty(view.name)
        if not fixing:  # a fix's failure is no fact of the text
            outcome.entry = (None, Entry([], error=outcome.error))
    except MemoryError:  # over the worker's memory budget: the worker ends, and the run goes on
        raise
    except Exception as error:  # a bug of memlint's: one line for this file, the run goes on
        outcome.error = f"internal error ({type(error).__name__}: {error}); please report it"
    if timer is not None:
        outcome.seconds = timer.totals()
    return outcome


def _write(task: _Task, outcome: FileOutcome, lint: Callable[[_Task], FileOutcome]) -> bool:
    """Write the fix a file's outcome holds; True when the file was rewritten. A file changed
    since it was read is skipped with a warning; one that cannot be written keeps the findings
    of the text it holds (`lint`: how the run lints a file)."""
    rewrite, outcome.rewrite = outcome.rewrite, None
    if rewrite is None:
        return False
    try:
        write_back(task.path, rewrite.text, rewrite.expected)
    except FileChanged as change:
        outcome.warning = f"not fixed: {change}"
        outcome.findings, outcome.fixed, outcome.notebook = [], [], None
        return False
    except OSError as error:
        unfixed = lint(replace(task, options=replace(task.options, fix=False, diff=False, fix_diffs=False)))
        outcome.error = f"cannot write: {(error.strerror or str(error)).lower()}; fixes not applied"
        outcome.findings, outcome.fixed, outcome.notebook = unfixed.findings, [], unfixed.notebook
        return False
    outcome.entry = (rewrite.text.text, Entry(outcome.findings, asked=outcome.asked,
                                              notebook=outcome.notebook is not None))
    return True


def _failed(task: _Task, over: str, why: str) -> FileOutcome:
    """The outcome of a file whose worker process ran out of time or memory, or died."""
    if over == "time":
        return FileOutcome(task.display, warning=f"not linted: it takes more than {task.options.file_timeout:g} s "
                                                 f"of CPU time (see --file-timeout)")
    if over == "memory":
        memory = task.options.memory_budget or 0
        return FileOutcome(task.display, warning=f"not linted: it needs more than the {memory / 2**20:.0f} MiB "
                                                 f"of memory a worker may use")
    return FileOutcome(task.display, error=f"internal error ({why}); please report it")


def _cached(entry: Entry, source: SourceText, display: str, options: Options) -> Optional[FileOutcome]:
    """The outcome an entry for `source` stands for under these options; None when it does not
    say enough (--fix with something to fix; JSON that wants diffs the entry lacks)."""
    findings = [replace(f, path=display) for f in entry.findings]
    if (options.fix or options.diff) and any(fix_allowed(f.fix, options.unsafe_fixes) for f in findings):
        return None
    outcome = FileOutcome(display, findings=findings, error=entry.error)
    if options.fix_diffs and not (options.fix or options.diff):
        if entry.diffs is None and any(f.fix is not None for f in findings):
            return None
        header = diff_header(display)
        outcome.fix_diffs = [header + d if d else d for d in (entry.diffs or [None] * len(findings))]
    if entry.notebook:
        outcome.notebook = Notebook.from_text(source.text, source.encoding)
    return outcome


@dataclass
class _Prepared:
    """A file read and looked up in the cache, before the project's summaries are known."""

    index: int  # its place among the outcomes
    outcome: FileOutcome
    task: _Task
    entry: Optional[Entry] = None  # what the cache holds for its text
    key: str = ""  # with a cache: what its entries are kept by besides its text (memlint.cache.file_key)
    digest: str = ""  # with a cache: its text's (memlint.cache.text_digest)
    summary: Optional[ModuleSummary] = None  # its summary, from the cache
    settled: bool = False  # its outcome is in place


def _prepare(index: int, path: Path, display: str, rules: Sequence[Type[Rule]], options: Options,
             target: Optional[TorchVersion], cache: Optional[Cache]) -> Tuple[FileOutcome, Optional[_Prepared]]:
    """Read the file and look its result up in the cache: its outcome so far, and what the run
    needs to finish it (None: nothing, it could not be read)."""
    started = time.perf_counter()
    notebook = is_notebook(path)
    try:
        source = read_source(path) if notebook else read(path)
    except TooLarge as error:
        return FileOutcome(display, warning=str(error)), None
    except (UnreadableFile, NotebookError) as error:
        return FileOutcome(display, error=str(error)), None
    read_seconds = time.perf_counter() - started
    outcome = FileOutcome(display)
    outcome.notes = [] if notebook else _noqa_notes(source.text)
    prepared = _Prepared(index, outcome, _Task(path, display, tuple(rules), source, options, target))
    if cache is not None:
        prepared.key, prepared.digest = file_key(display, path, rules, target), text_digest(source.text)
        prepared.entry = cache.get(prepared.key, prepared.digest, rules)
    if options.profile:
        outcome.seconds = {"read": read_seconds}
        if cache is not None:
            outcome.seconds["cache"] = time.perf_counter() - started - read_seconds
    return outcome, prepared


def _standing(outcome: FileOutcome, options: Options) -> bool:
    """Whether a lint's outcome is all these options want (not when --fix has something to fix)."""
    return not ((options.fix or options.diff) and any(fix_allowed(f.fix, options.unsafe_fixes)
                                                      for f in outcome.findings))


def _noqa_notes(text: str) -> List[Tuple[int, str]]:
    return [(line, f"`# noqa` names {code}, which is no memlint rule") for line, code in unknown_codes(text)]


def _size(task: _Task) -> int:
    return len(task.source.text)


def _project_key(modules: Dict[str, Tuple[str, str]], names: FrozenSet[str], prepared: Sequence[_Prepared],
                 summarised: Callable[[_Prepared], bool]) -> str:
    """What every answer of the project (memlint.analysis.project) is drawn from, as a digest:
    each module's path, its place and name, and, for a module the project has a summary of
    (`summarised`), what that summary is made from: its text, and the key its results are kept
    by (its name as shown, which says whether it is a test module; its rules and torch); the
    place and name of each notebook, which asks as a module of that name. The same key, the
    same answers to the same questions. Without a project, answers depend on nothing."""
    if not names:
        return "alone"
    files = {str(p.task.path): p for p in prepared}
    rows = []
    for path in sorted(set(modules) | set(files)):
        p = files.get(path)
        summary = [p.key, p.digest] if p is not None and path in modules and summarised(p) else None
        rows.append([path, *modules.get(path, module_name(path)), summary])
    return text_digest(json.dumps(rows))


def run(paths: Sequence[str], config: AnyConfig, registry: Mapping[str, Type[Rule]],
        options: Options, notices: Optional[List[str]] = None) -> List[FileOutcome]:
    """Lint (or fix) every file under `paths`, in discovery order whatever the number of jobs;
    each file with its own configuration (`config.for_file`: memlint.config.Configurations), so
    selection and configuration errors raise ConfigError before any file is linted. Each
    file's fixes are held to the configured `target-torch`, else to its project's declared
    one. `notices` gets one-line warnings about the run itself (processes that could not be
    started).

    The Python files linted together are a project (memlint.analysis.project): each module is
    first linted alone and summarised, then linted again knowing the other modules' summaries,
    only where its analysis asked a question that the project now answers differently. A
    result from the cache stands while its file's text and its answers are the same: at once
    when it was found in the same project (the same key), else once the project is known and
    asked again. A run whose every result stands so reads no summary and lints nothing."""
    if options.memory_budget is None:
        options = replace(options, memory_budget=memory_budget(options.jobs))
    cache, options = options.cache, replace(options, cache=None)  # the cache stays in this process
    forget_folders()
    outcomes: List[FileOutcome] = []
    items = list(discover(paths, config, options.force_exclude, options.require_files))
    modules = project_files([item for item in items if not isinstance(item, BadPath)])
    names = frozenset(name for _, name in modules.values()) if len(modules) > 1 else frozenset()
    prepared: List[_Prepared] = []
    for item in items:
        if isinstance(item, BadPath):
            display = display_path(item.path)
            outcomes.append(FileOutcome(display, warning=item.message) if item.warning
                            else FileOutcome(display, error=item.message))
            continue
        file_config = config.for_file(item)
        rules = file_config.rules_for(item, registry)
        target = file_config.target_for(item)
        outcome, ready = _prepare(len(outcomes), item, display_path(item), rules, options, target, cache)
        if ready is not None:
            prepared.append(ready)
        outcomes.append(outcome)
    try:
        if cache is not None:  # what the cache found in this very project stands
            key = _project_key(modules, names, prepared, lambda p: True)
            for p in prepared:
                if p.entry is not None and p.entry.project == key:
                    _take(outcomes, p, options)
        if not all(p.settled for p in prepared):
            _lint_project(prepared, outcomes, modules, names, options, cache, notices)
    finally:
        if cache is not None:
            cache.save()
    return outcomes


def _take(outcomes: List[FileOutcome], p: _Prepared, options: Options) -> None:
    """Put the outcome of a file's cache entry in its place, where it says all the options want."""
    assert p.entry is not None
    cached = _cached(p.entry, p.task.source, p.task.display, options)
    if cached is not None:
        cached.seconds, cached.notes = p.outcome.seconds, p.outcome.notes
        outcomes[p.index] = cached
        p.settled = True


def _lint_project(prepared: List[_Prepared], outcomes: List[FileOutcome], modules: Dict[str, Tuple[str, str]],
                  names: FrozenSet[str], options: Options, cache: Optional[Cache],
                  notices: Optional[List[str]]) -> None:
    """Settle the files the cache did not: summarise the project's modules (from the cache,
    else in the first phase), then keep what stands and lint the rest knowing the project.
    The names of its modules get the longer ones its imports give some (namespace packages)."""
    sources = {str(p.task.path): p.task.source.text for p in prepared if str(p.task.path) in modules}
    imported, device_imported = imported_modules(sources, modules) if names else (frozenset(), frozenset())
    aliases = namespace_names(modules, imported) if names else {}
    names |= frozenset(aliases)
    imported |= frozenset(aliases[name][1] for name in imported if name in aliases)  # by their longer names
    device_imported |= frozenset(aliases[name][1] for name in device_imported if name in aliases)
    named = text_digest(json.dumps(sorted(names)))  # what every summary's key holds of the names
    if cache is not None and names:
        for p in prepared:
            path = str(p.task.path)
            if path in sources:
                p.summary = cache.get_summary(p.key, _summary_key(modules[path], imported, named), p.digest)

    # The first phase: every module of the project whose summary is not in the cache, linted alone.
    first = [p for p in prepared if names and p.summary is None and str(p.task.path) in modules]
    alone = map_in_order(partial(_lint, names=names, imported=imported, device_imported=device_imported), [replace(p.task, summarize=True) for p in first],  # type: ignore[type-var]
                         options.jobs, size=_size, failed=_failed, budget=options.file_timeout,
                         memory=options.memory_budget, notices=notices, start=unguard)
    found: Dict[int, FileOutcome] = {}
    for p, outcome in zip(first, alone):
        p.summary = outcome.summary
        found[p.index] = outcome
    project = Project(modules, {str(p.task.path): p.summary for p in prepared
                                if p.summary is not None}, imported, aliases) if names else None
    key = _project_key(modules, names, prepared, lambda p: p.summary is not None) if cache is not None else ""

    # What stands: a first lint whose questions get the same answers now, a cached result likewise.
    second: List[_Prepared] = []
    for p in prepared:
        if p.settled:
            continue
        path = str(p.task.path)
        outcome = found.get(p.index)
        if outcome is not None:
            if same_answers(project, path, outcome.asked) and _standing(outcome, options):
                _keep(cache, p, outcome, key)
                _settle(outcomes, p.index, outcome)
                continue
        elif p.entry is not None and (p.entry.project == key or same_answers(project, path, p.entry.asked)):
            _take(outcomes, p, options)
            if p.settled:
                if cache is not None and p.entry.project != key:  # the answers hold in this project too
                    cache.put(p.key, p.digest, replace(p.entry, project=key))
                continue
        second.append(p)
    if cache is not None:
        for p in first:
            if p.summary is not None:
                cache.put_summary(p.key, _summary_key(modules[str(p.task.path)], imported, named), p.digest, p.summary)
    lint = partial(_lint, project=project, names=names)
    rewritten: List[str] = []

    def write(index: int, outcome: FileOutcome) -> None:
        with held():  # a stopping signal waits for the file to be written, and noted
            if _write(second[index].task, outcome, lint):
                rewritten.append(outcome.display)

    try:
        # (a module of tests is gated again: its gate also tells which rules may report there)
        linted = map_in_order(lint, [replace(p.task, compiled=True) if p.index in found and
                                     not is_test_file(p.task.display) else p.task for p in second],
                              options.jobs, size=_size,
                              failed=_failed, budget=options.file_timeout, memory=options.memory_budget,
                              notices=notices, done=write, start=unguard)
    except KeyboardInterrupt as stop:
        raise Interrupted(getattr(stop, "signum", signal.SIGINT), rewritten) from None
    for p, outcome in zip(second, linted):
        _keep(cache, p, outcome, key)
        _settle(outcomes, p.index, outcome)


def _keep(cache: Optional[Cache], p: _Prepared, outcome: FileOutcome, key: str) -> None:
    """Cache what a lint found of a text (`outcome.entry`), its answers those of the project `key`."""
    if outcome.entry is None:
        return
    text, entry = outcome.entry
    outcome.entry = None
    if cache is not None:
        header = diff_header(p.task.display)
        diffs = None if entry.diffs is None else [d[len(header):] if d else d for d in entry.diffs]
        digest = p.digest if text is None else text_digest(text)  # (a text of its own: a fix's)
        cache.put(p.key, digest, replace(entry, diffs=diffs, project=key))


def _summary_key(module: Tuple[str, str], imported: FrozenSet[str], named: str) -> Tuple[str, ...]:
    """What a module's summary depends on besides its text: its root and name, whether
    another file of the project imports it (memlint.analysis.summary.summarize), and the
    digest of the project's module names (`named`: a call is summarised as the project's when
    its name is one)."""
    return (*module, "imported" if module[1] in imported else "not imported", named)


def _settle(outcomes: List[FileOutcome], index: int, outcome: FileOutcome) -> None:
    """Put a lint's outcome in its place, with the time its reading and cache look-up took,
    and what was noted of its text."""
    for phase, seconds in outcomes[index].seconds.items():
        outcome.seconds[phase] = outcome.seconds.get(phase, 0.0) + seconds
    outcome.notes = outcomes[index].notes
    outcomes[index] = outcome


def lint_text(source: SourceText, path: Path, display: str, config: AnyConfig,
              registry: Mapping[str, Type[Rule]], options: Options) -> FileOutcome:
    """Lint (or fix) `source` as if it were the file `path` (standard input, an editor's
    buffer): its configuration, rules, torch target and notebook handling are those a run
    gives that file, linted alone (as one file of a project is when named by itself).
    Nothing is read, cached or written: with --fix, the fixed text is the outcome's `text`."""
    file_config = config.for_file(path)
    task = _Task(path, display, tuple(file_config.rules_for(path, registry)), source,
                 replace(options, in_memory=True, cache=None, jobs=1), file_config.target_for(path))
    outcome = _lint(task)
    outcome.notes = [] if is_notebook(path) else _noqa_notes(source.text)
    return outcome
