"""JSON for other tools: a list of findings with 1-based positions and each fix's own diff.

The keys are a contract: code, name, message, filename, cell (a notebook's cell number, else
null; lines then count inside the cell), line, column, end_line, end_column,
fix (null, or {"safety": "safe" | "unsafe", "message": ..., "diff": unified diff of that fix alone}).
"""

from __future__ import annotations

import json
from typing import Sequence

from memlint.run import FileOutcome


def render(outcomes: Sequence[FileOutcome]) -> str:
    items = []
    for outcome in outcomes:
        diffs = outcome.fix_diffs or [None] * len(outcome.findings)
        for finding, diff in zip(outcome.findings, diffs):
            items.append({
                "code": finding.code,
                "name": finding.name,
                "message": finding.message,
                "filename": outcome.display,
                "cell": finding.cell,
                "line": finding.range.line,
                "column": finding.range.column,
                "end_line": finding.range.end_line,
                "end_column": finding.range.end_column,
                "fix": None if finding.fix is None else {
                    "safety": finding.fix.safety.value,
                    "message": finding.fix.description,
                    "diff": diff,
                },
            })
    return json.dumps(items, indent=2)
