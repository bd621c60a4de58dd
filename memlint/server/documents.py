"""What the language server knows of an open document, found the way the command line finds
it: the text is linted as the file it stands for (memlint.run.lint_text: that file's
configuration, rules, torch target and notebook handling), so the editor and `memlint` never
disagree. A notebook document is linted as the `.ipynb` file its cells make.

Fixes: a finding's own fix is the diff `--output-format json` gives for it (the same run
makes both), applied to the text; "fix all" is `--fix` held in memory. Only fixes that the
configuration allows are offered: safe ones, and unsafe ones where `unsafe-fixes` (or
`memlint server --unsafe-fixes`) says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Type

from memlint.config import Configurations, Overrides
from memlint.engine import fix_allowed
from memlint.findings import Finding
from memlint.rule import Rule
from memlint.run import FileOutcome, Options, lint_text
from memlint.server.edits import StaleDiff, apply_diff
from memlint.sourcefile import SourceText


@dataclass(frozen=True)
class Settings:
    """How the server was started: `memlint server [--config FILE] [--unsafe-fixes]`."""

    config: Optional[Path] = None
    unsafe_fixes: Optional[bool] = None


@dataclass
class Linted:
    """One lint of one document: what was found, and whether fixes may be unsafe."""

    outcome: FileOutcome
    unsafe: bool

    def fixable(self, finding: Finding) -> bool:
        return fix_allowed(finding.fix, self.unsafe)


def configurations(root: Path, registry: Mapping[str, Type[Rule]], settings: Settings) -> Configurations:
    """The configurations as they are on disk now (read afresh for each lint, so that an edited
    pyproject.toml counts at once); ConfigError when one is wrong."""
    return Configurations(root, registry, settings.config, Overrides(unsafe_fixes=settings.unsafe_fixes))


def lint(text: str, path: Path, root: Path, registry: Mapping[str, Type[Rule]], settings: Settings,
         fix: bool = False) -> Linted:
    """Lint `text` as the file `path`, as `memlint` run in `root` would (with `fix`: fix it, the
    fixed text in `outcome.text`); a file the configuration excludes gets nothing, as a walked
    folder's would."""
    configs = configurations(root, registry, settings)
    unsafe = configs.root.unsafe_fixes  # a setting of the run, as on the command line in `root`
    if configs.for_file(path).is_excluded(path):
        return Linted(FileOutcome(str(path)), unsafe)
    options = Options(fix=fix, fix_diffs=not fix, unsafe_fixes=unsafe)
    outcome = lint_text(SourceText(text, "utf-8"), path, str(path), configs, registry, options)
    return Linted(outcome, unsafe)


def fixed_text(text: str, linted: Linted, index: int) -> Optional[str]:
    """`text` with the fix of finding `index` alone; None when it has none allowed, or its diff
    no longer fits the text."""
    outcome = linted.outcome
    finding = outcome.findings[index]
    if not linted.fixable(finding) or index >= len(outcome.fix_diffs) or not outcome.fix_diffs[index]:
        return None
    try:
        return apply_diff(text, outcome.fix_diffs[index])  # type: ignore[arg-type]
    except StaleDiff:
        return None


# -- notebooks ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    """One cell of a notebook document: its text document's URI and text, and whether it is Python."""

    uri: str
    text: str
    code: bool


def notebook_json(cells: Sequence[Cell]) -> str:
    """The .ipynb text the cells make: what memlint lints for a notebook document. Cells that
    are not Python code (markdown, other languages) stay, so that cell numbers match."""
    return json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c.text}
                  if c.code else {"cell_type": "markdown", "metadata": {}, "source": c.text} for c in cells],
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }, indent=1)


def cell_texts(notebook: str) -> List[str]:
    """Each cell's text in a notebook's JSON text."""
    return [c["source"] if isinstance(c["source"], str) else "".join(c["source"])
            for c in json.loads(notebook)["cells"]]


def changed_cells(cells: Sequence[Cell], notebook: Optional[str]) -> Dict[str, str]:
    """cell URI -> new text, for the cells a notebook text (after a fix) changes."""
    if notebook is None:
        return {}
    return {cell.uri: new for cell, new in zip(cells, cell_texts(notebook)) if new != cell.text}
