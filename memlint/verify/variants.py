"""What to compare: the original script against each fix alone and all fixes, or a fixture's
before.py against its after.py. Uses the engine's public functions; starts no process."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Type

from memlint.engine import SourceError, apply_fixes, check, fix, fix_allowed
from memlint.rule import Rule
from memlint.verify.loops import TimedLoop, timed_loop
from memlint.verify.measure import Launcher

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

FIXTURE = re.compile(r"^(MEM[0-9]{3})-[A-Za-z0-9_.-]+$")


LAUNCHERS = ("torchrun",)
LAUNCH_FILE = "verify.toml"  # in a fixture folder: how its scripts are started


class LaunchError(ValueError):
    """A fixture's verify.toml that cannot be used; the message is one line."""


@dataclass(frozen=True)
class Program:
    source: str
    path: str  # what it runs as
    launcher: Optional[Launcher] = None  # None: `python path`


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
    loop: Optional[TimedLoop] = None  # a time claim's loop, timed per iteration (None: the whole run)

    def time_loop(self, lines: Sequence[int]) -> "Comparison":
        """Sets `loop` for a time claim: the loop around `lines` (its findings) that the fix kept."""
        if "time-lower" in self.claims:
            self.loop = timed_loop(self.before.source, self.after.source, lines)
        return self


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


def script_plan(path: Path, rules: Sequence[Type[Rule]], unsafe: bool, launcher: Optional[Launcher] = None) -> Plan:
    """Raises SourceError (it does not parse) and OSError / UnicodeDecodeError (cannot read).
    Every program is started with `launcher` (None: `python path`)."""
    source = path.read_text(encoding="utf-8")
    name = str(path)
    by_code = {rule.CODE: rule for rule in rules}
    checked = check(source, name, rules)
    plan = Plan(findings=len(checked.findings))
    lines = _lines(checked.findings)
    original = Program(source, name, launcher)
    claims: List[str] = []
    timed: List[int] = []  # lines of findings whose claim is judged by time
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
        timed += [finding.line] if claim == "time-lower" else []
        plan.comparisons.append(Comparison(finding.code, finding.line, "", finding.fix.safety.value,
                                           [claim], original, Program(fixed, name, launcher), finding.fix.description,
                                           lines).time_loop([finding.line]))
    if plan.comparisons:
        try:
            every = fix(source, name, rules, unsafe=unsafe).source
        except SourceError as error:
            plan.skipped.append(("all", 0, str(error)))
        else:
            plan.comparisons.append(Comparison("all", None, "", "", claims, original, Program(every, name, launcher),
                                               "every fix applied", lines).time_loop(timed))
    return plan


def is_fixture(folder: Path) -> bool:
    return bool(FIXTURE.match(folder.name)) and (folder / "before.py").is_file() and (folder / "after.py").is_file()


def launchers(folder: Path, default: Optional[Launcher]) -> Dict[str, Optional[Launcher]]:
    """How a fixture's before.py and after.py are started: its verify.toml, e.g.

        [after]
        launcher = "torchrun"
        nproc-per-node = 2

    and `default` (the command line's `--launcher`) for a script it does not name. Raises
    LaunchError when the file is not valid or names an unknown launcher."""
    found: Dict[str, Optional[Launcher]] = {"before": default, "after": default}
    path = folder / LAUNCH_FILE
    if not path.is_file():
        return found
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise LaunchError(f"{path}: {error}") from None
    for script, table in data.items():
        if script not in found or not isinstance(table, dict) or set(table) - {"launcher", "nproc-per-node"}:
            raise LaunchError(f"{path}: expected [before] / [after] tables with launcher and nproc-per-node")
        name, nproc = table.get("launcher"), table.get("nproc-per-node", 1)
        if name not in LAUNCHERS or not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
            raise LaunchError(f"{path}: [{script}] needs launcher = {' | '.join(map(repr, LAUNCHERS))} "
                              "and a positive nproc-per-node")
        found[script] = Launcher(name, nproc)
    return found


def fixture_plan(folder: Path, registry: dict, launcher: Optional[Launcher] = None) -> Plan:
    """Every fixtures/<CODE>-<name>/ under `folder` (or `folder` itself if it is one). Raises
    LaunchError for a verify.toml that cannot be used."""
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
        started = launchers(sub, launcher)
        plan.comparisons.append(Comparison(
            code, None, sub.name, "", [_claim(rule)], Program(source, str(before), started["before"]),
            Program(after.read_text(encoding="utf-8"), str(after), started["after"]),
            "" if rule is not None else f"{code} is not a known rule: no claim to check", lines,
        ).time_loop([line for line, codes in lines.items() if code in codes]))
    return plan
