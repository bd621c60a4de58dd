"""What a run tells its user, and where: problems with paths and files on one stream (stderr),
the report in the format asked for on the other (stdout, or --output-file)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence, TextIO, Type

from memlint.report import github, sarif, text
from memlint.report import json as json_report
from memlint.rule import Rule
from memlint.run import FileOutcome


@dataclass(frozen=True)
class Style:
    format: str = "text"  # text | json | sarif | github
    statistics: bool = False  # counts per rule instead of findings
    quiet: bool = False  # the findings and nothing else
    show_fixes: bool = False  # list what --fix changed (or --diff would)
    color: bool = False  # ANSI colours in text
    fixing: bool = False  # --fix: the summary counts what was fixed
    diff: bool = False  # --diff: the report is the diff
    unsafe: bool = False  # unsafe fixes count as fixable
    summary: bool = True  # a line that sums up (not when no path was named and none was found)


def problems(outcomes: Sequence[FileOutcome], err: TextIO) -> None:
    """One line per path that could not be linted, was skipped, or says something odd."""
    for outcome in outcomes:
        if outcome.error is not None:
            print(f"{outcome.display}: error: {outcome.error}", file=err)
        if outcome.warning is not None:
            print(f"{outcome.display}: warning: {outcome.warning}", file=err)
        for line, note in outcome.notes:
            print(f"{outcome.display}:{line}: warning: {note}", file=err)


def report(outcomes: Sequence[FileOutcome], registry: Mapping[str, Type[Rule]], style: Style,
           out: TextIO, err: TextIO) -> None:
    if style.format == "json":
        print(json_report.statistics(outcomes, registry, style.unsafe) if style.statistics
              else json_report.render(outcomes), file=out)
    elif style.format == "sarif":
        print(sarif.render(outcomes, registry), file=out)
    elif style.format == "github":
        for line in github.render(outcomes, registry):
            print(line, file=out)
    elif style.diff:
        for outcome in outcomes:
            if outcome.diff:
                out.write(outcome.diff)
        if not style.quiet:
            lines = text.fixes(outcomes, registry, "Would fix") if style.show_fixes else []
            fixable = sum(len(o.fixed) for o in outcomes)
            remaining = sum(len(o.findings) for o in outcomes)
            lines.append(f"Would fix {fixable} error{'' if fixable == 1 else 's'} ({remaining} remaining).")
            print("\n".join(lines), file=err)
    else:
        lines = (text.statistics(outcomes, registry, style.unsafe) if style.statistics
                 else text.findings(outcomes, style.unsafe, style.color))
        if not style.quiet:
            if style.show_fixes and style.fixing:
                lines += text.fixes(outcomes, registry, "Fixed")
            if style.summary:
                lines += text.summary(outcomes, style.unsafe, fixing=style.fixing)
        if lines:
            print("\n".join(lines), file=out)
