"""Every fixtures/<CODE>-<name>/ folder: before.py is reported, after.py is clean and stable under
a second fix, and both scripts run on a CPU. For a rule with a fix, `--fix` turns before.py into
after.py byte for byte; for a rule that only reports, after.py is the fix made by hand and `--fix`
leaves before.py as it is. Every rule has one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.engine import check, fix
from memlint.rules import registry

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FOLDERS = sorted(p for p in FIXTURES.iterdir() if p.is_dir() and (p / "before.py").exists())


def _rule(folder: Path):
    code = folder.name.split("-", 1)[0]
    rules = registry()
    assert code in rules, f"{folder.name}: no rule {code}"
    assert folder.name == f"{code}-{rules[code].NAME}", "folder is named <CODE>-<rule name>"
    return rules[code]


def test_every_rule_has_a_fixture():
    assert set(registry()) == {folder.name.split("-", 1)[0] for folder in FOLDERS}


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_fixture_before_is_fixed_into_after(folder):
    rule = _rule(folder)
    before = (folder / "before.py").read_text(encoding="utf-8")
    after = (folder / "after.py").read_text(encoding="utf-8")
    assert rule.CODE in [f.code for f in check(before, "before.py", [rule]).findings]
    expected = after if rule.FIX_SAFETY is not None else before  # a report-only rule changes nothing
    assert fix(before, "before.py", [rule], unsafe=True).source == expected
    assert rule.CODE not in [f.code for f in check(after, "after.py", [rule]).findings]
    assert fix(after, "after.py", [rule], unsafe=True).source == after


@pytest.mark.parametrize("script", [f / name for f in FOLDERS for name in ("before.py", "after.py")],
                         ids=[f"{f.name}/{name}" for f in FOLDERS for name in ("before.py", "after.py")])
def test_fixture_runs_on_cpu(script):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "MEMLINT_SCALE": "1"}
    result = subprocess.run([sys.executable, str(script)], cwd=script.parent, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
