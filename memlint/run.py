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
from memlint.engine import Checked, SourceError, check, fix, fix_diff, unified_diff
from memlint.files import BadPath, discover
from memlint.findings import Finding
from memlint.rule import Rule
from memlint.sourcefile import SourceText, UnreadableFile, read, write_back
from memlint.torch_target import DeclaredTargets, TorchVersion


@dataclass
class Options:
    fix: bool = False  # apply fixes and write them
    diff: bool = False  # compute what --fix would change, write nothing
    unsafe_fixes: bool = False
    fix_diffs: bool = False  # a diff per finding's fix (for JSON output)


@dataclass
class FileOutcome:
    display: str  # the path as the user should see it
    findings: List[Finding] = field(default_factory=list)  # what remains
    fixed: List[Finding] = field(default_factory=list)  # what --fix applied (or --diff would)
    diff: str = ""  # --diff: the whole file's change
    fix_diffs: List[Optional[str]] = field(default_factory=list)  # aligned with findings
    error: Optional[str] = None
    warning: Optional[str] = None  # skipped without failing the run (a broken link in a folder)


def display_path(path: Path) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if relative.startswith("..") else relative


def _lint_file(path: Path, display: str, rules: Sequence[Type[Rule]], options: Options,
               target: Optional[TorchVersion] = None) -> FileOutcome:
    outcome = FileOutcome(display)
    try:
        source = read(path)
        if options.fix or options.diff:
            result = fix(source.text, display, rules, unsafe=options.unsafe_fixes, target_torch=target)
            outcome.findings, outcome.fixed = result.remaining, result.applied
            if result.source != source.text:
                if options.diff:
                    outcome.diff = unified_diff(source.text, result.source, display)
                else:
                    try:
                        write_back(path, SourceText(result.source, source.encoding))
                    except OSError as error:  # nothing written: the file's findings stand as they are
                        outcome.error = f"cannot write: {(error.strerror or str(error)).lower()}; fixes not applied"
                        outcome.fixed = []
                        outcome.findings = check(source.text, display, rules, target).findings
            return outcome
        checked: Checked = check(source.text, display, rules, target)
        outcome.findings = checked.findings
        if options.fix_diffs:
            outcome.fix_diffs = [
                fix_diff(checked, f, display) if f.fix is not None else None for f in checked.findings
            ]
    except (UnreadableFile, SourceError) as error:
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
    for item in discover(paths, config):
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
