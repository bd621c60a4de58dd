"""The MEM2xx fixtures: before.py is reported, fixed into after.py byte for byte, after.py is
clean and stable under a second fix, and both run on a CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.engine import check, fix
from memlint.rules import registry

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FOLDERS = sorted(p for p in FIXTURES.glob("MEM2*") if (p / "before.py").exists())


def _rule(folder: Path):
    code = folder.name.split("-", 1)[0]
    rule = registry()[code]
    assert folder.name == f"{code}-{rule.NAME}"
    return rule


def test_every_fixable_autograd_rule_has_a_fixture():
    fixable = {c for c, r in registry().items() if c.startswith("MEM2") and r.FIX_SAFETY is not None}
    assert fixable == {f.name.split("-", 1)[0] for f in FOLDERS}


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_fixture_before_is_fixed_into_after(folder):
    rule = _rule(folder)
    before = (folder / "before.py").read_text(encoding="utf-8")
    after = (folder / "after.py").read_text(encoding="utf-8")
    assert rule.CODE in [f.code for f in check(before, "before.py", [rule]).findings]
    assert fix(before, "before.py", [rule], unsafe=True).source == after
    assert rule.CODE not in [f.code for f in check(after, "after.py", [rule]).findings]
    assert fix(after, "after.py", [rule], unsafe=True).source == after


@pytest.mark.parametrize("name", ["before.py", "after.py"])
@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_fixture_runs_on_cpu(folder, name):
    pytest.importorskip("torch")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "MEMLINT_SCALE": "1"}
    result = subprocess.run([sys.executable, str(folder / name)], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
