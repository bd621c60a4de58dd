"""SARIF 2.1.0 for code scanning (GitHub's upload-sarif and other viewers).

One run: the tool with every rule and its documentation, one result per finding with its
location and, when it has one, its fix as replacements of whole lines, and the files that could
not be checked as notifications of a failed invocation. Columns count code points, as
memlint's do. A notebook's findings point at the lines of the .ipynb file that hold the cell's
code (the cell's own line and column are in the message and the result's properties), so that
the location and the fix apply to the file that was scanned.

Paths are relative to the repository's root (`%SRCROOT%`), as code scanning resolves them,
wherever memlint ran. Each result has the level of its rule (memlint.report.severity) and a
`partialFingerprints` entry that stays when lines are added or removed around it (its rule,
file and message, and which of the file's equal findings it is), so that code scanning follows
a finding across commits instead of closing it and opening a new one.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Type
from urllib.parse import quote

from memlint import __version__
from memlint.docs import explain
from memlint.findings import Finding
from memlint.report.paths import from_root, repository_root
from memlint.report.severity import severity
from memlint.rule import Rule
from memlint.run import FileOutcome

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SOURCE_ROOT = "%SRCROOT%"
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def _artifact(display: str) -> dict:
    """A URI of the file's name as bytes (percent-encoded): a name in no encoding is still named."""
    path = Path(display)
    if path.is_absolute():
        return {"uri": path.as_uri()}
    return {"uri": quote(os.fsencode(path.as_posix())), "uriBaseId": SOURCE_ROOT}


def _rule(rule: Type[Rule]) -> dict:
    doc = inspect.cleandoc(rule.__doc__ or "").strip()
    return {
        "id": rule.CODE,
        "name": rule.NAME,
        "shortDescription": {"text": rule.MESSAGE},
        "fullDescription": {"text": doc, "markdown": doc},
        "help": {"text": explain(rule), "markdown": explain(rule)},
        "defaultConfiguration": {"enabled": rule.DEFAULT_ON, "level": severity(rule).value},
        "properties": {
            "fixSafety": rule.FIX_SAFETY.value if rule.FIX_SAFETY is not None else "none",
            "verifierClaim": rule.CLAIM.value,
        },
    }


def _replacements(diff: str) -> List[dict]:
    """A unified diff as SARIF replacements: each run of changed lines deletes whole lines
    (from column 1 of its first line to column 1 of the line after it) and inserts new ones."""
    replacements: List[dict] = []
    line = 0
    start: Optional[int] = None
    deleted = 0
    inserted: List[str] = []

    def flush() -> None:
        nonlocal start, deleted, inserted
        if start is not None:
            replacements.append({
                "deletedRegion": {"startLine": start, "startColumn": 1,
                                  "endLine": start + deleted, "endColumn": 1},
                "insertedContent": {"text": "".join(inserted)},
            })
        start, deleted, inserted = None, 0, []

    previous = ""
    for text in diff.splitlines(keepends=True)[2:]:  # after the ---/+++ header
        hunk = _HUNK.match(text)
        if hunk is not None:
            flush()
            line = int(hunk.group(1)) + (1 if hunk.group(2) == "0" else 0)
        elif text.startswith("\\"):  # "\ No newline at end of file": the line above has none
            if previous == "+":
                inserted[-1] = inserted[-1].rstrip("\r\n")
        elif text.startswith(" "):
            flush()
            line += 1
        else:
            if start is None:
                start = line
            if text.startswith("-"):
                deleted += 1
                line += 1
            else:
                inserted.append(text[1:])
        previous = text[:1]
    flush()
    return replacements


def _region(finding: Finding, outcome: FileOutcome) -> dict:
    where = finding.range
    if finding.cell is not None and outcome.notebook is not None:
        return {"startLine": outcome.notebook.file_line(finding.cell, where.line),
                "endLine": outcome.notebook.file_line(finding.cell, where.end_line)}
    return {"startLine": where.line, "startColumn": where.column,
            "endLine": where.end_line, "endColumn": where.end_column}


def _fingerprint(finding: Finding, file: str, occurrence: int) -> str:
    key = "\0".join((finding.code, file, finding.message, str(occurrence)))
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()


def _result(finding: Finding, outcome: FileOutcome, diff: Optional[str], index: Dict[str, int],
            levels: Dict[str, str], file: str, occurrence: int) -> dict:
    message = finding.message
    if finding.cell is not None:
        message += f" (cell {finding.cell}, line {finding.line}, column {finding.column})"
    result: dict = {
        "ruleId": finding.code,
        "ruleIndex": index[finding.code],
        "level": levels[finding.code],
        "message": {"text": message},
        "locations": [{"physicalLocation": {
            "artifactLocation": _artifact(file),
            "region": _region(finding, outcome),
        }}],
        "partialFingerprints": {"memlint/v1": _fingerprint(finding, file, occurrence)},
    }
    if finding.cell is not None:
        result["properties"] = {"cell": finding.cell, "cellLine": finding.line, "cellColumn": finding.column}
    if finding.fix is not None and diff:
        result["fixes"] = [{
            "description": {"text": f"{finding.fix.description} ({finding.fix.safety.value} fix)"},
            "artifactChanges": [{
                "artifactLocation": _artifact(file),
                "replacements": _replacements(diff),
            }],
        }]
    return result


def render(outcomes: Sequence[FileOutcome], registry: Mapping[str, Type[Rule]], root: Optional[Path] = None) -> str:
    root = root or repository_root()
    index = {code: position for position, code in enumerate(registry)}
    levels = {code: severity(rule).value for code, rule in registry.items()}
    results = []
    for outcome in outcomes:
        file = from_root(outcome.display, root)
        diffs = outcome.fix_diffs or [None] * len(outcome.findings)
        seen: Counter = Counter()
        for finding, diff in zip(outcome.findings, diffs):
            seen[finding.code, finding.message] += 1
            results.append(_result(finding, outcome, diff, index, levels, file, seen[finding.code, finding.message]))
    notifications = [
        {"level": "error", "message": {"text": outcome.error},
         "locations": [{"physicalLocation": {"artifactLocation": _artifact(from_root(outcome.display, root))}}]}
        for outcome in outcomes if outcome.error is not None
    ]
    run = {
        "tool": {"driver": {
            "name": "memlint",
            "version": __version__,
            "semanticVersion": __version__,
            "rules": [_rule(rule) for rule in registry.values()],
        }},
        "invocations": [{"executionSuccessful": not notifications,
                         "toolExecutionNotifications": notifications}],
        "originalUriBaseIds": {SOURCE_ROOT: {"uri": root.as_uri().rstrip("/") + "/"}},
        "columnKind": "unicodeCodePoints",
        "results": results,
    }
    return json.dumps({"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}, indent=2, ensure_ascii=False)
