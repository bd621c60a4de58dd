"""A run over paths: find the files, read each, lint or fix it, write fixes back.

Errors are per file (a missing path, an unreadable or unparsable file): they are collected
with the findings of the other files, never raised, so one bad file does not stop the run.

Fixes are made where files are linted (worker processes) and written here, in the run's own
process, as each file's result comes in: a file is written only if it still holds what was
read, a write is not cut short by Ctrl-C or SIGTERM, and a run stopped midway (Interrupted)
names the files it rewrote.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple, Type

from memlint.analysis.project import Project, ProjectView, imported_modules, project_files, same_answers
from memlint.analysis.summary import ModuleSummary
from memlint.cache import Cache, Entry
from memlint.config import AnyConfig, forget_folders
from memlint.engine import (SourceError, TooDeep, apply_fixes, check, diff_header, fix, fix_allowed, fix_diff,
                            unified_diff)
from memlint.files import BadPath, discover
from memlint.findings import Finding
from memlint.interrupts import Interrupted, held
from memlint.jobs import map_in_order, memory_budget
from memlint.notebook import Notebook, NotebookError, is_notebook
from memlint.profile import Timer
from memlint.rule import Rule
from memlint.sourcefile import FileChanged, SourceText, TooLarge, UnreadableFile, digest, read, write_back
from memlint.suppressions import unknown_codes
from memlint.torch_target import TorchVersion


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
    entry: Optional[Tuple[str, Entry]] = None  # the first phase: what to cache (text, result) if it stands
    rewrite: Optional[Rewrite] = None  # --fix: what to write, once back in the run's process


def display_path(path: Path) -> str:
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
    outcome.findings = [notebook.locate(f).detached() for f in checked.findings]
    if options.fix_diffs:
        outcome.fix_diffs = [
            unified_diff(notebook.text, notebook.updated(apply_fixes(checked, [f.fix], display)).text, display)
            if f.fix is not None else None
            for f in checked.findings
        ]
    outcome.notebook = notebook
    return outcome


def _lint_notebook(path: Path, display: str, rules: Sequence[Type[Rule]], options: Options,
                   target: Optional[TorchVersion], view: ProjectView,
                   source: Optional[SourceText] = None) -> FileOutcome:
    """A notebook's code cells, linted (or fixed) as one module; findings located by cell. The
    notebook is read from `path`, or is `source` when it is held in memory."""
    notebook = Notebook.read(path) if source is None else Notebook.from_text(source.text, source.encoding)
    try:
        return _lint_cells(notebook, display, rules, options, target, view)
    except SourceError:
        parsable = notebook.without_unparsable_cells()  # cells CPython accepts and LibCST does not
        if parsable is notebook:
            raise
        return _lint_cells(parsable, display, rules, options, target, view)


@dataclass(frozen=True)
class _Task:
    """One file to lint or fix, with its text already read (a worker process needs no more);
    a notebook is read where it is linted (its source is None, unless it is held in memory).
    `summarize`: the first phase of a run over a project (memlint.analysis.project): lint
    without the other modules' summaries, which are not known yet, and summarise this one."""

    path: Path
    display: str
    rules: Tuple[Type[Rule], ...]
    source: Optional[SourceText]
    options: Options
    target: Optional[TorchVersion]  # the oldest torch its fixes must run on
    summarize: bool = False


def _store(task: _Task, text: str, entry: Entry, outcome: FileOutcome) -> None:
    """Keep what a lint of `text` found in the cache; a first-phase lint's result may not stand,
    so it goes with the outcome, for the run to keep once it does."""
    if task.summarize:
        outcome.entry = (text, entry)
    elif task.options.cache is not None:
        header = diff_header(task.display)
        diffs = None if entry.diffs is None else [d[len(header):] if d else d for d in entry.diffs]
        task.options.cache.put(task.path, task.rules, task.target, text, replace(entry, diffs=diffs))


def _fix_file(task: _Task, source: SourceText, outcome: FileOutcome, timer: Optional[Timer],
              view: ProjectView) -> None:
    options = task.options
    result = fix(source.text, task.display, task.rules, unsafe=options.unsafe_fixes, target_torch=task.target,
                 timer=timer, project=view)
    outcome.findings = [f.detached() for f in result.remaining]
    outcome.fixed = [f.detached() for f in result.applied]
    outcome.asked = result.asked
    if result.source == source.text:
        _store(task, source.text, Entry(outcome.findings, asked=result.asked), outcome)
    elif options.diff:
        outcome.diff = unified_diff(source.text, result.source, task.display)
    elif options.in_memory:
        outcome.text = result.source
    else:
        outcome.rewrite = Rewrite(SourceText(result.source, source.encoding), source.digest)


def _lint(task: _Task, project: Optional[Project] = None, names: FrozenSet[str] = frozenset(),
          imported: FrozenSet[str] = frozenset()) -> FileOutcome:
    """Lint or fix one file (in a worker process, or here), knowing what `project` says of
    the other modules (`names`: those of the project's modules; `imported`: those the others
    import). Never raises: a bug of memlint's becomes one line for this file, and the run goes on."""
    outcome = FileOutcome(task.display)
    timer = Timer() if task.options.profile else None
    source = task.source
    view = ProjectView(project, names, str(task.path), imported)
    try:
        if is_notebook(task.path):
            outcome = _lint_notebook(task.path, task.display, task.rules, task.options, task.target, view, source)
        elif (task.options.fix or task.options.diff) and not task.summarize:
            _fix_file(task, source, outcome, timer, view)
        else:
            checked = check(source.text, task.display, task.rules, task.target, timer, project=view,
                            summarize=task.summarize)
            outcome.findings = [f.detached() for f in checked.findings]
            outcome.asked, outcome.summary = checked.asked, checked.summary
            if task.options.fix_diffs:
                diffs: Dict[int, str] = {}  # findings that share one fix share its diff
                for f in checked.findings:
                    if f.fix is not None and id(f.fix) not in diffs:
                        diffs[id(f.fix)] = fix_diff(checked, f, task.display, timer)
                outcome.fix_diffs = [diffs[id(f.fix)] if f.fix is not None else None for f in checked.findings]
            _store(task, source.text, Entry(outcome.findings, diffs=outcome.fix_diffs if task.options.fix_diffs else None,
                                            asked=checked.asked), outcome)
    except TooLarge as error:
        outcome.warning = str(error)
    except (UnreadableFile, NotebookError) as error:
        outcome.error = str(error)
    except TooDeep as error:  # valid code memlint cannot follow: skipped, as a file over its time budget
        outcome.warning = str(error)
    except SourceError as error:
        outcome.error = str(error)
        if task.summarize:
            outcome.summary = ModuleSummary.empty(view.name)
        if source is not None and not (task.options.fix or task.options.diff):  # a fix's failure is
            _store(task, source.text, Entry([], error=outcome.error), outcome)  # no fact of the text
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
    if task.source is not None:
        _store(task, rewrite.text.text, Entry(outcome.findings, asked=outcome.asked), outcome)
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


def _cached(entry: Entry, display: str, options: Options) -> Optional[FileOutcome]:
    """The outcome an entry stands for under these options; None when it does not say enough
    (--fix with something to fix; JSON that wants diffs the entry lacks)."""
    findings = [replace(f, path=display) for f in entry.findings]
    if (options.fix or options.diff) and any(fix_allowed(f.fix, options.unsafe_fixes) for f in findings):
        return None
    outcome = FileOutcome(display, findings=findings, error=entry.error)
    if options.fix_diffs and not (options.fix or options.diff):
        if entry.diffs is None and any(f.fix is not None for f in findings):
            return None
        header = diff_header(display)
        outcome.fix_diffs = [header + d if d else None for d in (entry.diffs or [None] * len(findings))]
    return outcome


@dataclass
class _Prepared:
    """A file read and looked up in the cache, before the project's summaries are known."""

    index: int  # its place among the outcomes
    outcome: FileOutcome
    task: Optional[_Task]  # None: nothing to lint (it could not be read)
    entry: Optional[Entry] = None  # what the cache holds for its text
    summary: Optional[ModuleSummary] = None  # its summary, from the cache


def _prepare(path: Path, display: str, rules: Sequence[Type[Rule]], options: Options,
             target: Optional[TorchVersion]) -> Tuple[FileOutcome, Optional[_Task], Optional[Entry]]:
    """Read the file and look its result up in the cache."""
    if is_notebook(path):  # read, and linted, where it is linted; never cached
        return FileOutcome(display), _Task(path, display, tuple(rules), None, options, target), None
    started = time.perf_counter()
    try:
        source = read(path)
    except TooLarge as error:
        return FileOutcome(display, warning=str(error)), None, None
    except UnreadableFile as error:
        return FileOutcome(display, error=str(error)), None, None
    read_seconds = time.perf_counter() - started
    notes = _noqa_notes(source.text)
    task = _Task(path, display, tuple(rules), source, options, target)
    entry = options.cache.get(path, task.rules, target, source.text) if options.cache is not None else None
    outcome = FileOutcome(display)
    outcome.notes = notes
    if options.profile:
        outcome.seconds = {"read": read_seconds}
        if options.cache is not None:
            outcome.seconds["cache"] = time.perf_counter() - started - read_seconds
    return outcome, task, entry


def _standing(outcome: FileOutcome, options: Options) -> bool:
    """Whether a lint's outcome is all these options want (not when --fix has something to fix)."""
    return not ((options.fix or options.diff) and any(fix_allowed(f.fix, options.unsafe_fixes)
                                                      for f in outcome.findings))


def _noqa_notes(text: str) -> List[Tuple[int, str]]:
    return [(line, f"`# noqa` names {code}, which is no memlint rule") for line, code in unknown_codes(text)]


def _size(task: _Task) -> int:
    if task.source is None:
        try:
            return os.path.getsize(task.path)
        except OSError:
            return 0
    return len(task.source.text)


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
    result from the cache stands while its file's text and its answers are the same."""
    if options.memory_budget is None:
        options = replace(options, memory_budget=memory_budget(options.jobs))
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
        outcome, task, entry = _prepare(item, display_path(item), rules, options, target)
        if task is not None:
            prepared.append(_Prepared(len(outcomes), outcome, task, entry))
        outcomes.append(outcome)
    sources = {str(p.task.path): p.task.source.text for p in prepared  # type: ignore[union-attr]
               if p.task.source is not None and str(p.task.path) in modules}  # type: ignore[union-attr]
    imported = imported_modules(sources, modules) if names else frozenset()
    if options.cache is not None and names:
        for p in prepared:
            path = str(p.task.path)  # type: ignore[union-attr]
            if path in sources:
                p.summary = options.cache.get_summary(p.task.path, _summary_key(modules[path], imported),  # type: ignore[union-attr]
                                                      sources[path])

    # The first phase: every module of the project whose summary is not in the cache, linted alone.
    first = [p for p in prepared if names and p.task.source is not None and p.summary is None and  # type: ignore[union-attr]
             str(p.task.path) in modules]  # type: ignore[union-attr]
    alone = map_in_order(partial(_lint, names=names, imported=imported), [replace(p.task, summarize=True) for p in first],  # type: ignore[type-var]
                         options.jobs, size=_size, failed=_failed, budget=options.file_timeout,
                         memory=options.memory_budget, notices=notices)
    found: Dict[int, FileOutcome] = {}
    for p, outcome in zip(first, alone):
        p.summary = outcome.summary
        found[p.index] = outcome
    project = Project(modules, {str(p.task.path): p.summary for p in prepared  # type: ignore[union-attr]
                                if p.summary is not None}, imported) if names else None

    # What stands: a first lint whose questions get the same answers now, a cached result likewise.
    second: List[_Prepared] = []
    for p in prepared:
        task = p.task
        assert task is not None
        outcome = found.get(p.index)
        if outcome is not None:
            if same_answers(project, str(task.path), outcome.asked) and _standing(outcome, options):
                if outcome.entry is not None:
                    _store(task, *outcome.entry, outcome)
                _settle(outcomes, p.index, outcome)
                continue
        elif p.entry is not None and same_answers(project, str(task.path), p.entry.asked):
            cached = _cached(p.entry, task.display, options)
            if cached is not None:
                cached.seconds, cached.notes = p.outcome.seconds, p.outcome.notes
                outcomes[p.index] = cached
                continue
        second.append(p)
    if options.cache is not None:
        for p in first:
            if p.summary is not None:
                options.cache.put_summary(p.task.path, _summary_key(modules[str(p.task.path)], imported),  # type: ignore[union-attr]
                                          p.task.source.text, p.summary)  # type: ignore[union-attr]
    lint = partial(_lint, project=project, names=names)
    rewritten: List[str] = []

    def write(index: int, outcome: FileOutcome) -> None:
        with held():  # a stopping signal waits for the file to be written, and noted
            if _write(second[index].task, outcome, lint):  # type: ignore[arg-type]
                rewritten.append(outcome.display)

    try:
        linted = map_in_order(lint, [p.task for p in second], options.jobs, size=_size,  # type: ignore[misc]
                              failed=_failed, budget=options.file_timeout, memory=options.memory_budget,
                              notices=notices, done=write)
    except KeyboardInterrupt as stop:
        raise Interrupted(getattr(stop, "signum", signal.SIGINT), rewritten) from None
    for p, outcome in zip(second, linted):
        _settle(outcomes, p.index, outcome)
    return outcomes


def _summary_key(module: Tuple[str, str], imported: FrozenSet[str]) -> Tuple[str, ...]:
    """What a module's summary depends on besides its text: its root and name, and whether
    another file of the project imports it (memlint.analysis.summary.summarize)."""
    return (*module, "imported" if module[1] in imported else "not imported")


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
