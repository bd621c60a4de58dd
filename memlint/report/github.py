"""GitHub Actions workflow commands: one annotation per finding, shown on the pull request's
diff: `::error file=...,line=...,col=...,endLine=...,endColumn=...,title=MEM101::message`, at the
rule's level (`::error`, `::warning`, `::notice`: memlint.report.severity), the file named from
the repository's root, as GitHub resolves it (memlint.report.paths).

Values are escaped as GitHub's own toolkit does (`%`, CR and LF in the message; also `:` and
`,` in properties). Columns are given only for a finding on one line (GitHub ignores them
otherwise), the end column being the last character's. A notebook's finding points at the
line of the .ipynb file that holds the code, and its message starts with `cell N:line:col:`.
A file that could not be checked gets an annotation too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Type

from memlint.findings import Finding
from memlint.report.paths import from_root, repository_root
from memlint.report.severity import Severity, severity
from memlint.rule import Rule
from memlint.run import FileOutcome

_COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.NOTE: "notice"}


def _data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(value: str) -> str:
    return _data(value).replace(":", "%3A").replace(",", "%2C")


def _command(properties: Dict[str, object], message: str, command: str = "error") -> str:
    fields = ",".join(f"{key}={_property(str(value))}" for key, value in properties.items())
    return f"::{command} {fields}::{_data(message)}"


def _annotation(finding: Finding, outcome: FileOutcome, file: str, command: str) -> str:
    where = finding.range
    properties: Dict[str, object] = {"file": file}
    message = finding.message
    if finding.cell is not None and outcome.notebook is not None:
        properties["line"] = outcome.notebook.file_line(finding.cell, where.line)
        properties["endLine"] = outcome.notebook.file_line(finding.cell, where.end_line)
        message = f"cell {finding.cell}:{where.line}:{where.column}: {message}"
    else:
        properties["line"] = where.line
        if where.end_line == where.line:
            properties["col"] = where.column
        properties["endLine"] = where.end_line
        if where.end_line == where.line:
            properties["endColumn"] = max(where.end_column - 1, where.column)
    properties["title"] = finding.code
    return _command(properties, message, command)


def render(outcomes: Sequence[FileOutcome], registry: Mapping[str, Type[Rule]],
           root: Optional[Path] = None) -> List[str]:
    root = root or repository_root()
    lines = []
    for outcome in outcomes:
        file = from_root(outcome.display, root)
        if outcome.error is not None:
            lines.append(_command({"file": file, "title": "memlint"}, outcome.error))
        lines += [_annotation(f, outcome, file, _COMMANDS[severity(registry[f.code])]) for f in outcome.findings]
    return lines
