"""JSON for other tools: a list of findings with 1-based positions and each fix's own diff.

The keys are a contract: code, name, message, filename, cell (a notebook's cell number, else
null; lines then count inside the cell), line, column, end_line, end_column,
fix (null, or {"safety": "safe" | "unsafe", "message": ..., "diff": unified diff of that fix alone}).
With --statistics, a list of {"code", "name", "count", "fixable"}, the most frequent first, as ruff's.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Mapping, Sequence, Type

from memlint.engine import fix_allowed
from memlint.rule import Rule
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


def statistics(outcomes: Sequence[FileOutcome], registry: Mapping[str, Type[Rule]], unsafe: bool) -> str:
    counts = Counter(f.code for o in outcomes for f in o.findings)
    fixable = {f.code for o in outcomes for f in o.findings if fix_allowed(f.fix, unsafe)}
    return json.dumps([{"code": code, "name": registry[code].NAME, "count": count, "fixable": code in fixable}
                       for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))], indent=2)
