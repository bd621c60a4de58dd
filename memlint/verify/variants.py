"""What to compare: the original script against each fix alone and all fixes, or a fixture's
before.py against its after.py. Uses the engine's public functions; starts no process."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Type

from memlint.engine import SourceError, apply_fixes, check, fix, fix_allowed
from memlint.rule import Rule

FIXTURE = re.compile(r"^(MEM[0-9]{3})-[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class Program:
    source: str
    path: str  # what it runs as


@dataclass
class Comparison:
    code: str  # MEM101, or "all" for every fix together
    line: Optional[int]  # the finding's line (None for fixtures and "all")
    fixture: str  # the fixture folder's name ("" for a script)
    safety: str  # safe | unsafe | "" (fixtures, all)
    claims: List[str]
    before: Program
    after: Program
    description: str = ""
    findings: Dict[int, List[str]] = field(default_factory=dict)  # line of `before` -> codes found there


@dataclass
class Plan:
    comparisons: List[Comparison] = field(default_factory=list)
    skipped: List[Tuple[str, int, str]] = field(default_factory=list)  # (code, line, why)
    findings: int = 0


def _claim(rule: Optional[Type[Rule]]) -> str:
    return rule.CLAIM.value if rule is not None else "none"


def _lines(findings) -> Dict[int, List[str]]:
    lines: Dict[int, List[str]] = {}
    for finding in findings:
        codes = lines.setdefault(finding.line, [])
        codes += [finding.code] if finding.code not in codes else []
    return lines


def script_plan(path: Path, rules: Sequence[Type[Rule]], unsafe: bool) -> Plan:
    """Raises SourceError (it does not parse) and OSError / UnicodeDecodeError (cannot read)."""
    source = path.read_text(encoding="utf-8")
    name = str(path)
    by_code = {rule.CODE: rule for rule in rules}
    checked = check(source, name, rules)
    plan = Plan(findings=len(checked.findings))
    lines = _lines(checked.findings)
    original = Program(source, name)
    claims: List[str] = []
    for finding in checked.findings:
        if finding.fix is None:
            plan.skipped.append((finding.code, finding.line, "the rule offers no fix"))
            continue
        if not fix_allowed(finding.fix, unsafe):
            plan.skipped.append((finding.code, finding.line, "unsafe fix: pass --unsafe-fixes to verify it"))
            continue
        try:
            fixed = apply_fixes(checked, [finding.fix], name)
        except SourceError as error:
            plan.skipped.append((finding.code, finding.line, str(error)))
            continue
        claim = _claim(by_code.get(finding.code))
        claims += [claim] if claim not in claims else []
        plan.comparisons.append(Comparison(finding.code, finding.line, "", finding.fix.safety.value,
                                           [claim], original, Program(fixed, name), finding.fix.description, lines))
    if plan.comparisons:
        try:
            every = fix(source, name, rules, unsafe=unsafe).source
        except SourceError as error:
            plan.skipped.append(("all", 0, str(error)))
        else:
            plan.comparisons.append(Comparison("all", None, "", "", claims, original, Program(every, name),
                                               "every fix applied", lines))
    return plan


def is_fixture(folder: Path) -> bool:
    return bool(FIXTURE.match(folder.name)) and (folder / "before.py").is_file() and (folder / "after.py").is_file()


def fixture_plan(folder: Path, registry: dict) -> Plan:
    """Every fixtures/<CODE>-<name>/ under `folder` (or `folder` itself if it is one)."""
    folders = [folder] if is_fixture(folder) else [f for f in sorted(folder.iterdir()) if is_fixture(f)]
    plan = Plan()
    for sub in folders:
        code = FIXTURE.match(sub.name).group(1)  # type: ignore[union-attr]
        before, after = sub / "before.py", sub / "after.py"
        rule = registry.get(code)
        source = before.read_text(encoding="utf-8")
        try:
            lines = _lines(check(source, str(before), [rule]).findings) if rule is not None else {}
        except SourceError:  # it still runs: the run says what is wrong with it
            lines = {}
        plan.comparisons.append(Comparison(
            code, None, sub.name, "", [_claim(rule)], Program(source, str(before)),
            Program(after.read_text(encoding="utf-8"), str(after)),
            "" if rule is not None else f"{code} is not a known rule: no claim to check", lines,
        ))
    return plan
