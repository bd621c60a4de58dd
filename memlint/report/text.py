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


def _paint(text: str, style: str, color: bool) -> str:
    return f"\x1b[{style}m{text}\x1b[0m" if color else text


BOLD, RED, CYAN = "1", "1;31", "36"


def findings(outcomes: Sequence[FileOutcome], unsafe: bool, color: bool = False) -> List[str]:
    lines = []
    for outcome in outcomes:
        path = _paint(outcome.display, BOLD, color)
        for f in outcome.findings:
            mark = _paint("[*]", CYAN, color) + " " if fix_allowed(f.fix, unsafe) else ""
            cell = f"cell {f.cell}:" if f.cell is not None else ""
            lines.append(f"{path}:{cell}{f.line}:{f.column}: {_paint(f.code, RED, color)} {mark}{f.message}")
    return lines


def fixes(outcomes: Sequence[FileOutcome], registry: Mapping[str, Type[Rule]], heading: str) -> List[str]:
    """What --fix changed (`heading` "Fixed"), or --diff would, per file and rule; nothing when nothing."""
    total = sum(len(o.fixed) for o in outcomes)
    if not total:
        return []
    lines = [f"{heading} {_plural(total, 'error')}:"]
    for outcome in outcomes:
        if outcome.fixed:
            lines.append(f"- {outcome.display}:")
            for code, count in sorted(Counter(f.code for f in outcome.fixed).items()):
                lines.append(f"    {count} × {code} ({registry[code].NAME})")
    return lines + [""]


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
