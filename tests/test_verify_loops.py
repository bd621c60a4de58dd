"""Time claims judged per iteration: which loop (memlint.verify.loops), and its iterations timed in
the child (memlint/verify/loopclock.py), by `sys.monitoring` or a line trace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.rules import registry
from memlint.verify import loopclock
from memlint.verify.judge import judge
from memlint.verify.loops import Loop, TimedLoop, enclosing, timed_loop
from memlint.verify.measure import Measurement, RunSpec, run
from memlint.verify.variants import fixture_plan, script_plan

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

PER_ELEMENT = """\
import torch
correct = 0
for step in range(20):
    preds = torch.zeros(8)
    for i in range(8):
        if preds[i].item() == 0:
            correct += 1
print(correct)
"""


def test_the_loop_timed_is_the_innermost_one_the_fix_keeps():
    """MEM105's fix replaces the per-element loop: the step loop around it is timed, in both."""
    fixed = PER_ELEMENT.replace("    for i in range(8):\n        if preds[i].item() == 0:\n            correct += 1\n",
                                "    correct += (preds == 0).sum().item()\n")
    assert [loop.line for loop in enclosing(PER_ELEMENT, [6])] == [5, 3]
    assert timed_loop(PER_ELEMENT, fixed, [6]) == TimedLoop(Loop(3, 3, 7), Loop(3, 3, 5))


def test_a_loop_moved_by_the_fix_is_followed_and_no_loop_means_the_whole_run():
    before = "import torch\nx = torch.ones(4)\nfor step in range(3):\n    k = x @ x\n    print(k + step)\n"
    after = "import torch\nx = torch.ones(4)\nk = x @ x\nfor step in range(3):\n    print(k + step)\n"
    assert timed_loop(before, after, [4]) == TimedLoop(Loop(3, 3, 5), Loop(4, 4, 5))
    assert timed_loop(before, after, [2]) is None
    assert timed_loop("x = (", "x = 1\n", [1]) is None  # what does not parse has no loop


def test_a_while_loop_ticks_on_its_condition_line():
    source = "n = 3\nwhile (\n        n > 0):\n    n -= 1\n"
    assert enclosing(source, [4]) == [Loop(2, 3, 4)]


def test_every_time_fixture_is_judged_by_the_loop_around_its_finding():
    plan = fixture_plan(ROOT / "fixtures", registry())
    timed = {c.code: c.loop for c in plan.comparisons if "time-lower" in c.claims}
    assert set(timed) == {"MEM102", "MEM103", "MEM104", "MEM105", "MEM501"}
    for code, loop in timed.items():
        assert loop is not None, code
        before = (ROOT / "fixtures").glob(f"{code}-*/before.py").__next__().read_text().splitlines()
        assert before[loop.before.line - 1].lstrip().startswith("for "), code


def test_a_script_plan_times_each_fix_by_the_innermost_loop_around_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\n"
                      "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
                      "model = torch.nn.Linear(64, 4).to(device)\n"
                      "for epoch in range(2):\n"
                      "    for step in range(10):\n"
                      "        level = torch.full((64, 64), step / 10).to(device)\n"
                      "        loss = model(level).sum()\n"
                      "    print(loss.item())\n")
    plan = script_plan(script, [registry()["MEM103"]], unsafe=True)
    assert [(c.code, c.loop) for c in plan.comparisons] == \
        [("MEM103", TimedLoop(Loop(5, 5, 7), Loop(5, 5, 7))), ("all", TimedLoop(Loop(5, 5, 7), Loop(5, 5, 7)))]


LOOPS = """\
import time

def pause(seconds):
    time.sleep(seconds)

def epoch(first):
    for step in range(12):
        pause(0.15 if first and step == 0 else 0.01)

for n in range(2):
    epoch(n == 0)
    time.sleep(0.3)
print("done")
"""


def _check(loops):
    (timed,) = loops
    assert timed["line"] == 7
    assert timed["iterations"] == 24  # 12 a call: the 0.3 s between calls is no iteration
    assert timed["warmup"] == 5 and 0.15 <= timed["first"] < 0.3
    assert 0.009 <= timed["per_iteration"] < 0.1  # neither the 0.15 s warm-up nor the 0.3 s between calls


def test_loop_clock_in_process_times_steady_iterations_of_a_loop_in_a_function():
    code = compile(LOOPS, "loops.py", "exec")
    syncs = []
    clock = loopclock.LoopClock(code, [[7, 7, 8]], lambda: syncs.append(1))
    clock.start()
    try:
        exec(code, {"__name__": "__main__"})
    finally:
        loops = clock.stop()
    _check(loops)
    assert len(syncs) == 26  # the device is synchronised before every reading: 13 ticks a call
    assert sys.gettrace() is None and (not hasattr(sys, "monitoring") or sys.monitoring.get_tool(4) is None)


def _interpreters():
    """This Python, and one with sys.monitoring (3.12+) where this one has none."""
    found = [sys.executable]
    if not hasattr(sys, "monitoring"):
        for name in ("python3.14", "python3.13", "python3.12"):
            path = shutil.which(name)
            if path and subprocess.run([path, "-c", "import sys; sys.monitoring"], capture_output=True).returncode == 0:
                found.append(path)
                break
    return found


@pytest.mark.parametrize("python", _interpreters())
def test_the_child_times_the_loop_it_is_given(tmp_path, python):
    path = tmp_path / "loops.py"
    path.write_text(LOOPS)
    m = run(RunSpec(LOOPS, str(path), torch=False, loops=[[7, 7, 8]]), python=python)
    assert m.status == "ok", m.stderr_tail
    _check(m.loops)
    assert m.per_iteration(7) == m.loops[0]["per_iteration"] and m.per_iteration(3) is None


def test_a_loop_too_short_to_leave_out_its_warm_up_has_no_time_per_iteration(tmp_path):
    path = tmp_path / "short.py"
    source = "for i in range(3):\n    pass\n"
    path.write_text(source)
    m = run(RunSpec(source, str(path), torch=False, loops=[[1, 1, 2]]))
    assert m.loops == [{"line": 1, "iterations": 3, "warmup": 1, "per_iteration": None, "first": m.loops[0]["first"]}]


def _timed(seconds, per_iteration, line, iterations=100):
    return Measurement("ok", 0, "device", 0, seconds=seconds,
                       loops=[{"line": line, "iterations": iterations, "warmup": 20, "per_iteration": per_iteration,
                               "first": 1.0}])


def test_time_claims_are_judged_per_iteration_not_by_the_whole_run():
    """Start-up that varies by a second hides a 2 ms saving in the whole run's time; the steady
    iterations show it."""
    loop = TimedLoop(Loop(17, 17, 23), Loop(18, 18, 23))
    before = [_timed(5.0, 0.0040, 17), _timed(6.5, 0.0041, 17)]
    after = [_timed(6.0, 0.0020, 18), _timed(5.2, 0.0021, 18)]
    assert judge("time-lower", before, after).verdict == "inconclusive"
    j = judge("time-lower", before, after, loop)
    assert (j.metric, j.verdict, round(j.ratio, 2)) == ("time/iter", "confirmed", 0.51)
    assert j.loop == {"before": 17, "after": 18, "iterations": [100, 100]}


def test_a_run_without_steady_iterations_falls_back_to_the_whole_run_and_says_so():
    loop = TimedLoop(Loop(17, 17, 23), Loop(18, 18, 23))
    before = [_timed(5.0, 0.004, 17), _timed(5.1, 0.004, 17)]
    after = [_timed(5.0, None, 18, iterations=2), _timed(5.05, 0.002, 18)]
    j = judge("time-lower", before, after, loop)
    assert j.metric == "time" and j.verdict == "inconclusive" and j.loop is None
    assert "timed over the whole run: the loop at line 18 ran 2 iterations" in j.reason


def test_the_verify_report_names_the_loop_timed():
    done = subprocess.run([sys.executable, "-m", "memlint.verify", str(ROOT / "fixtures" / "MEM105-host-device-sync-in-loop"),
                           "--device", "cpu", "--repeat", "2", "-q"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env=ENV)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("MEM105"))
    assert row.split()[3] == "time/iter", done.stdout  # the verdict is the GPU run's to show: a CPU is shared
    assert "MEM105 MEM105-host-device-sync-in-loop: the loop at before.py:19 (after.py:19), 20 iterations a run; " \
           "whole runs " in done.stdout


@pytest.mark.gpu
def test_gpu_time_fixtures_confirmed_per_iteration_of_their_loop():
    """On a GPU: MEM102 (a 4096 x 4096 matmul hoisted) and MEM501 (empty_cache every step), each
    96 steps at MEMLINT_SCALE=8, judged by their loop's time per iteration."""
    from memlint.verify.measure import probe

    if not probe().get("cuda"):
        pytest.skip("needs a CUDA GPU")
    done = subprocess.run([sys.executable, "-m", "memlint.verify", str(ROOT / "fixtures"), "--select", "MEM102,MEM501",
                           "--device", "cuda", "--scale", "8", "--repeat", "2", "--output-format", "json", "-q"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env=ENV)
    assert done.returncode == 0, done.stderr
    for result in json.loads(done.stdout)["results"]:
        (claim,) = result["claims"]
        assert (claim["metric"], claim["verdict"]) == ("time/iter", "confirmed"), (result["code"], claim)
        assert claim["loop"]["iterations"] == [96, 96]
        assert all(run["loops"][0]["per_iteration"] < run["seconds"] / 50 for run in result["before_runs"])
