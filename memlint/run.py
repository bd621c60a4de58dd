"""A run over paths: find the files, read each, lint or fix it, write fixes back.

Errors are per file (a missing path, an unreadable or unparsable file): they are collected
with the findings of the other files, never raised, so one bad file does not stop the run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Mapping, Optional, Sequence, Type

from memlint.config import Config
from memlint.engine import Checked, SourceError, apply_fixes, check, fix, fix_diff, unified_diff
from memlint.files import BadPath, discover
from memlint.findings import Finding
from memlint.notebook import Notebook, NotebookError, is_notebook
from memlint.rule import Rule
from memlint.sourcefile import SourceText, UnreadableFile, read, write_back
from memlint.torch_target import DeclaredTargets, TorchVersion


@dataclass
class Options:
    fix: bool = False  # apply fixes and write them
    diff: bool = False  # compute what --fix would change, write nothing
    unsafe_fixes: bool = False
    fix_diffs: bool = False  # a diff per finding's fix (for JSON output)
    force_exclude: bool = False  # `exclude` applies to files named on the command line too


@dataclass
class FileOutcome:
    display: str  # the path as the user should see it
    findings: List[Finding] = field(default_factory=list)  # what remains
    fixed: List[Finding] = field(default_factory=list)  # what --fix applied (or --diff would)
    diff: str = ""  # --diff: the whole file's change
    fix_diffs: List[Optional[str]] = field(default_factory=list)  # aligned with findings
    error: Optional[str] = None
    warning: Optional[str] = None  # skipped without failing the run (a broken link in a folder)
    notebook: Optional[Notebook] = None  # for a notebook: where its cells lie in the file


def display_path(path: Path) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if relative.startswith("..") else relative


def _write_back(path: Path, text: SourceText, outcome: FileOutcome) -> bool:
    """Write a fixed file; when that fails nothing was written, and the outcome says so."""
    try:
        write_back(path, text)
        return True
    except OSError as error:
        outcome.error = f"cannot write: {(error.strerror or str(error)).lower()}; fixes not applied"
        outcome.fixed = []
        return False


def _lint_cells(path: Path, notebook: Notebook, display: str, rules: Sequence[Type[Rule]],
                options: Options, target: Optional[TorchVersion]) -> FileOutcome:
    outcome = FileOutcome(display, error="; ".join(notebook.problems) or None)
    if options.fix or options.diff:
        result = fix(notebook.module, display, rules, unsafe=options.unsafe_fixes, target_torch=target)
        fixed = notebook.updated(result.source)
        outcome.findings = [fixed.locate(f) for f in result.remaining]
        outcome.fixed = [notebook.locate(f) for f in result.applied]
        if fixed.text != notebook.text:
            if options.diff:
                outcome.diff = unified_diff(notebook.text, fixed.text, display)
            elif not _write_back(path, SourceText(fixed.text, notebook.encoding), outcome):
                outcome.findings = [notebook.locate(f) for f in check(notebook.module, display, rules, target).findings]
                fixed = notebook
        outcome.notebook = fixed
        return outcome
    checked = check(notebook.module, display, rules, target)
    outcome.findings = [notebook.locate(f) for f in checked.findings]
    if options.fix_diffs:
        outcome.fix_diffs = [
            unified_diff(notebook.text, notebook.updated(apply_fixes(checked, [f.fix], display)).text, display)
            if f.fix is not None else None
            for f in checked.findings
        ]
    outcome.notebook = notebook
    return outcome


def _lint_notebook(path: Path, display: str, rules: Sequence[Type[Rule]], options: Options,
                   target: Optional[TorchVersion]) -> FileOutcome:
    """A notebook's code cells, linted (or fixed) as one module; findings located by cell."""
    notebook = Notebook.read(path)
    try:
        return _lint_cells(path, notebook, display, rules, options, target)
    except SourceError:
        parsable = notebook.without_unparsable_cells()  # cells CPython accepts and LibCST does not
        if parsable is notebook:
            raise
        return _lint_cells(path, parsable, display, rules, options, target)


def _lint_file(path: Path, display: str, rules: Sequence[Type[Rule]], options: Options,
               target: Optional[TorchVersion] = None) -> FileOutcome:
    outcome = FileOutcome(display)
    try:
        if is_notebook(path):
            return _lint_notebook(path, display, rules, options, target)
        source = read(path)
        if options.fix or options.diff:
            result = fix(source.text, display, rules, unsafe=options.unsafe_fixes, target_torch=target)
            outcome.findings, outcome.fixed = result.remaining, result.applied
            if result.source != source.text:
                if options.diff:
                    outcome.diff = unified_diff(source.text, result.source, display)
                elif not _write_back(path, SourceText(result.source, source.encoding), outcome):
                    outcome.findings = check(source.text, display, rules, target).findings
            return outcome
        checked: Checked = check(source.text, display, rules, target)
        outcome.findings = checked.findings
        if options.fix_diffs:
            outcome.fix_diffs = [
                fix_diff(checked, f, display) if f.fix is not None else None for f in checked.findings
            ]
    except (UnreadableFile, SourceError, NotebookError) as error:
        outcome.error = str(error)
    except Exception as error:  # a bug of memlint's: one line for this file, the run goes on
        outcome.error = f"internal error ({type(error).__name__}: {error}); please report it"
    return outcome


def run(paths: Sequence[str], config: Config, registry: Mapping[str, Type[Rule]],
        options: Options) -> List[FileOutcome]:
    """Lint (or fix) every file under `paths`; selection errors raise ConfigError before any work.
    Each file's fixes are held to the configured `target-torch`, else to its project's declared one."""
    base_rules = config.selection.rules(registry)
    declared = DeclaredTargets(config.root if config.source is not None else None)
    outcomes = []
    for item in discover(paths, config, options.force_exclude):
        if isinstance(item, BadPath):
            display = display_path(item.path)
            outcomes.append(FileOutcome(display, warning=item.message) if item.warning
                            else FileOutcome(display, error=item.message))
            continue
        ignored = config.ignored_codes(item)
        rules = config.selection.rules(registry, ignored) if ignored else base_rules
        target = config.target_torch if config.target_torch is not None else declared.for_file(item)
        outcomes.append(_lint_file(item, display_path(item), rules, options, target))
    return outcomes
