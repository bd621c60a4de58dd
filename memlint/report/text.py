"""ruff-style text: `path:line:col: CODE [*] message` (`nb.ipynb:cell 3:4:1: ...` in a notebook),
then a summary of what --fix can do."""

from __future__ import annotations

from collections import Counter
from typing import List, Mapping, Sequence, Type

from memlint.engine import fix_allowed
from memlint.findings import Safety
from memlint.rule import Rule
from memlint.run import FileOutcome


def _plural(count: int, word: str) -> str:
    if count == 1:
        return f"{count} {word}"
    return f"{count} {word}{'es' if word.endswith(('s', 'x')) else 's'}"


def findings(outcomes: Sequence[FileOutcome], unsafe: bool) -> List[str]:
    lines = []
    for outcome in outcomes:
        for f in outcome.findings:
            mark = "[*] " if fix_allowed(f.fix, unsafe) else ""
            cell = f"cell {f.cell}:" if f.cell is not None else ""
            lines.append(f"{outcome.display}:{cell}{f.line}:{f.column}: {f.code} {mark}{f.message}")
    return lines


def summary(outcomes: Sequence[FileOutcome], unsafe: bool, fixing: bool) -> List[str]:
    remaining = [f for o in outcomes for f in o.findings]
    fixed = sum(len(o.fixed) for o in outcomes)
    failed = sum(1 for o in outcomes if o.error is not None)
    if not remaining and not fixed and not failed:
        return ["All checks passed!"]
    unchecked = f"; {_plural(failed, 'path')} could not be checked." if failed else "."
    if fixing:
        return [f"Found {_plural(len(remaining) + fixed, 'error')} ({fixed} fixed, {len(remaining)} remaining)"
                + unchecked]
    if failed:
        return [f"Found {_plural(len(remaining), 'error')}{unchecked}"]
    lines = [f"Found {_plural(len(remaining), 'error')}."]
    fixable = sum(1 for f in remaining if fix_allowed(f.fix, unsafe))
    hidden = sum(1 for f in remaining if f.fix is not None and f.fix.safety is Safety.UNSAFE and not unsafe)
    if fixable or hidden:
        line = f"[*] {fixable} fixable with the `--fix` option"
        if hidden:
            line += (f" ({_plural(hidden, 'hidden fix')} can be enabled with the "
                     f"`--unsafe-fixes` option)")
        lines.append(line + ".")
    return lines


def statistics(outcomes: Sequence[FileOutcome], registry: Mapping[str, Type[Rule]], unsafe: bool) -> List[str]:
    counts = Counter(f.code for o in outcomes for f in o.findings)
    fixable = {f.code for o in outcomes for f in o.findings if fix_allowed(f.fix, unsafe)}
    width = max((len(str(n)) for n in counts.values()), default=1)
    return [
        f"{count:>{width}}\t{code}\t{'[*]' if code in fixable else '[ ]'} {registry[code].NAME}"
        for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]
