"""Runs side by side: the jobs limit, timed runs alone, the memory budget, and an out-of-memory
next to others run again alone. Fake work in threads; no process is started."""

from __future__ import annotations

import threading
import time

import pytest

from memlint.verify.measure import Measurement
from memlint.verify.schedule import Task, footprints, run_all


class Recorder:
    """Fake work: notes which tasks run at the same time; `oom(task, others)` decides failures."""

    def __init__(self, hold: float = 0.15, oom=lambda task, others: False, peaks=None):
        self.lock = threading.Lock()
        self.now = []
        self.overlaps = []  # for each run: the tasks running when it started
        self.hold, self.oom, self.peaks = hold, oom, peaks or {}

    def __call__(self, task: Task) -> Measurement:
        with self.lock:
            others = list(self.now)
            self.now.append(task)
            self.overlaps.append((task, others))
        time.sleep(self.hold)
        with self.lock:
            self.now.remove(task)
        status = "oom" if self.oom(task, others) else "ok"
        return Measurement(status, 0 if status == "ok" else 1, "device", self.peaks.get(task.program, 100))

    def most_at_once(self) -> int:
        return 1 + max(len(others) for _, others in self.overlaps)


def _run(tasks, work, jobs=3, budget=None):
    return run_all(tasks, work, jobs, budget, lambda m: m.peak_bytes, footprints(0))


def test_at_most_jobs_at_once_and_the_first_run_alone():
    tasks = [Task(f"p{i % 4}", False) for i in range(12)]
    work = Recorder()
    results = _run(tasks, work, jobs=3)
    assert len(results) == 12 and all(m.status == "ok" for m in results)
    assert work.most_at_once() == 3
    first, others_at_first = work.overlaps[0]
    assert first is tasks[0] and others_at_first == []
    assert not any(tasks[0] in others for task, others in work.overlaps[1:])  # nothing started beside it


def test_a_timed_run_goes_alone():
    tasks = [Task("a", False), Task("b", False), Task("timed", True), Task("c", False), Task("d", False)]
    work = Recorder()
    _run(tasks, work, jobs=4)
    timed = tasks[2]
    assert dict((id(t), o) for t, o in work.overlaps)[id(timed)] == []
    assert not any(timed in others for _, others in work.overlaps)


def test_memory_budget_limits_runs_at_once():
    tasks = [Task(f"p{i}", False) for i in range(8)]
    work = Recorder(peaks={f"p{i}": 100 for i in range(8)})
    _run(tasks, work, jobs=8, budget=250)  # two of 100 fit, three do not
    assert work.most_at_once() == 2


def test_an_out_of_memory_beside_others_is_run_again_alone():
    tasks = [Task("small", False), Task("small", False), Task("big", False), Task("small", False)]
    work = Recorder(oom=lambda task, others: task.program == "big" and bool(others))
    results = _run(tasks, work, jobs=4)
    assert [m.status for m in results] == ["ok"] * 4
    big_runs = [others for task, others in work.overlaps if task is tasks[2]]
    assert len(big_runs) == 2 and big_runs[0] and big_runs[1] == []


def test_an_out_of_memory_alone_is_the_measurement():
    tasks = [Task("big", False)] + [Task("small", False) for _ in range(3)]
    work = Recorder(oom=lambda task, others: task.program == "big")
    results = _run(tasks, work, jobs=4)
    assert results[0].status == "oom" and len(work.overlaps) == 4  # it ran alone first: no retry


def test_a_failing_run_stops_the_rest():
    aborted = []

    def work(task):
        if task.program == "bad":
            raise RuntimeError("harness bug")
        time.sleep(0.05)
        return Measurement("ok", 0, "device", 1)

    tasks = [Task("good", False), Task("bad", False), Task("good", False)]
    with pytest.raises(RuntimeError, match="harness bug"):
        run_all(tasks, work, 2, None, lambda m: m.peak_bytes, footprints(0), lambda: aborted.append(True))
    assert aborted == [True]


def test_footprint_of_an_unseen_program_is_the_largest_seen():
    estimate = footprints(10)
    assert estimate(Task("a", False), {}) is None
    assert estimate(Task("a", False), {"a": 5, "b": 50}) == 15
    assert estimate(Task("c", False), {"a": 5, "b": 50}) == 60
