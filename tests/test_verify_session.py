"""Plans and sessions without processes: variants, run order, de-duplication, rows."""

from __future__ import annotations

import io

from memlint.config import Selection
from memlint.rules import registry
from memlint.verify.measure import Measurement
from memlint.verify.session import Options, measure_plan, timelines
from memlint.verify.variants import Comparison, Plan, Program, fixture_plan, script_plan

SCRIPT = """\
import torch
n = int("64")  # a shape MEM101 cannot read as small
for step in range(3):
    a = torch.zeros(n, n)
    a.add_(1)
    print(a.sum().item())
for step in range(3):
    b = torch.rand(n).cuda()
    print(b.sum().item())
"""


def _rules():
    return Selection(select=["MEM101"]).rules(registry())  # the opt-in rule and its two fixes, one safe, one unsafe


def test_script_plan_one_variant_per_fix_and_one_with_all(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    plan = script_plan(path, _rules(), unsafe=True)
    codes = [(c.code, c.line, c.safety) for c in plan.comparisons]
    assert codes == [("MEM101", 4, "safe"), ("MEM101", 8, "unsafe"), ("all", None, "")]
    single, other, every = plan.comparisons
    assert single.before.source == SCRIPT and single.after.path == str(path)
    assert "a.zero_()" in single.after.source and "b = torch.rand(n).cuda()" in single.after.source
    assert "a.zero_()" in every.after.source and "b.uniform_()" in every.after.source
    assert every.claims == ["peak-lower"]


def test_script_plan_skips_unsafe_fixes_unless_asked(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    plan = script_plan(path, _rules(), unsafe=False)
    assert [(c.code, c.line) for c in plan.comparisons] == [("MEM101", 4), ("all", None)]
    assert plan.skipped == [("MEM101", 8, "unsafe fix: pass --unsafe-fixes to verify it")]


def test_fixture_plan_reads_folders_and_claims(tmp_path):
    for name in ("MEM101-alloc", "MEM999-future", "README-not-one"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "before.py").write_text("print('before')\n")
        (tmp_path / name / "after.py").write_text("print('after')\n")
    plan = fixture_plan(tmp_path, registry())
    assert [(c.code, c.fixture, c.claims) for c in plan.comparisons] == [
        ("MEM101", "MEM101-alloc", ["peak-lower"]), ("MEM999", "MEM999-future", ["none"])]
    assert "not a known rule" in plan.comparisons[1].description
    assert [c.fixture for c in fixture_plan(tmp_path / "MEM101-alloc", registry()).comparisons] == ["MEM101-alloc"]


def test_session_interleaves_runs_and_runs_identical_programs_once():
    original, fixed = Program("orig", "s.py"), Program("fixed", "s.py")
    plan = Plan([Comparison("MEM101", 3, "", "safe", ["peak-lower"], original, fixed),
                 Comparison("all", None, "", "", ["peak-lower"], original, Program("fixed", "s.py"))])
    order = []

    def runner(spec, python, heartbeat):
        order.append(spec.source)
        peak = 512 if spec.source == "orig" else 256
        return Measurement("ok", 0, "host", peak * 2**20, seconds=1.0, stdout_sha256="x",
                           timeline=[[0.0, 1.0]] if spec.timeline else None)

    stream = io.StringIO()
    rows = measure_plan(plan, Options(repeat=3), stream, runner, host_timeline=True)
    assert order == ["orig", "fixed"] * 3
    assert [r.verdict for r in rows] == ["confirmed", "confirmed"]
    assert len(rows[0].before) == 3 and rows[0].judgements[0].ratio == 0.5
    assert stream.getvalue().count("\n") == 6 and "[6/6]" in stream.getvalue()
    panels = timelines(rows, Options(repeat=3), stream, runner)
    assert panels == [("s.py", [("original", [[0.0, 1.0]]), ("all fixes", [[0.0, 1.0]])])]
    assert len(order) == 6  # host timelines come from the measured runs: nothing ran again


def test_runs_that_go_alone_come_after_the_others_still_interleaved():
    """A timed run empties the device before it starts; put them together at the end, so that
    the memory runs share the device without a wait before each timed one."""
    timed, timed_fix = Program("timed", "t.py"), Program("timed fix", "t.py")
    peak, peak_fix = Program("peak", "p.py"), Program("peak fix", "p.py")
    plan = Plan([Comparison("MEM102", None, "MEM102-x", "", ["time-lower"], timed, timed_fix),
                 Comparison("MEM101", None, "MEM101-x", "", ["peak-lower"], peak, peak_fix)])
    order = []

    def runner(spec, python, heartbeat):
        order.append(spec.source)
        return Measurement("ok", 0, "host", 2**20, seconds=1.0, stdout_sha256="x")

    measure_plan(plan, Options(repeat=2), None, runner)
    assert order == ["peak", "peak fix", "peak", "peak fix", "timed", "timed fix", "timed", "timed fix"]


def test_a_program_that_timed_out_is_not_run_again_for_every_repeat():
    """One hanging script with the defaults (3 repeats, 300 s) would cost half an hour: after
    its first timeout, its other runs are not started, and count as timed out."""
    original, fixed = Program("hangs", "s.py"), Program("fixed", "s.py")
    plan = Plan([Comparison("MEM101", 3, "", "safe", ["peak-lower"], original, fixed)])
    order = []

    def runner(spec, python, heartbeat):
        order.append(spec.source)
        if spec.source == "hangs":
            return Measurement("timeout", None, "host", None, error="no result after 300 s")
        return Measurement("ok", 0, "host", 2**20, seconds=1.0, stdout_sha256="x")

    [row] = measure_plan(plan, Options(repeat=3), io.StringIO(), runner)
    assert order == ["hangs", "fixed", "fixed", "fixed"]
    assert [m.status for m in row.before] == ["timeout"] * 3
    assert row.before[1].error == "not run: an earlier run of the same program timed out"
