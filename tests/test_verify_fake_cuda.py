"""The CUDA code path of the child and the CLI, on a CPU: a stand-in `torch` that claims a GPU.

The stand-in records what the child asks of it (peak reset, memory history) and returns the
device peak the script sets, so the device branch is exercised in CI; the real thing is
tests/test_verify_cli.py's `gpu` tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from memlint.verify.measure import RunSpec, probe, run

ROOT = Path(__file__).resolve().parents[1]

FAKE_TORCH = '''
__version__ = "0.0-fake"
calls = []


def manual_seed(seed):
    calls.append("manual_seed")


class _Memory:
    history = []

    @staticmethod
    def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=0, **kw):
        calls.append(f"history {enabled}")
        if enabled is None:  # as torch does: stopping drops what was recorded
            del _Memory.history[:]

    @staticmethod
    def _snapshot():
        return {"device_traces": [_Memory.history]}


class cuda:
    memory = _Memory
    peak = 0
    allocated = 0

    class OutOfMemoryError(RuntimeError):
        pass

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def manual_seed_all(seed):
        calls.append("manual_seed_all")

    @staticmethod
    def init():
        calls.append("init")

    @staticmethod
    def is_initialized():
        return False

    @staticmethod
    def synchronize():
        calls.append("synchronize")

    @staticmethod
    def reset_peak_memory_stats():
        calls.append("reset_peak")

    @staticmethod
    def get_device_name():
        return "Fake GPU"

    @staticmethod
    def current_device():
        return 0

    @staticmethod
    def memory_allocated():
        return cuda.allocated

    @staticmethod
    def mem_get_info():
        return 80 * 2**30, 96 * 2**30

    peaks = None  # per device, when a script sets them

    @staticmethod
    def device_count():
        return len(cuda.peaks) if cuda.peaks else 1

    @staticmethod
    def max_memory_allocated(device=None):
        return cuda.peaks[device] if cuda.peaks and device is not None else cuda.peak

    @staticmethod
    def max_memory_reserved(device=None):
        return cuda.max_memory_allocated(device) + 2**20
'''


def _fake(tmp_path) -> dict:
    (tmp_path / "fake" / "torch").mkdir(parents=True)
    (tmp_path / "fake" / "torch" / "__init__.py").write_text(FAKE_TORCH)
    return {"PYTHONPATH": str(tmp_path / "fake")}


def _script(tmp_path, name, peak_mib, extra=""):
    path = tmp_path / name
    path.write_text(textwrap.dedent(f"""
        import torch
        torch.cuda.peak = {peak_mib} * 2**20
        t0 = 1_700_000_000_000_000
        here = [{{"filename": __file__, "line": 4, "name": "<module>"}}]
        torch.cuda.memory.history[:] = [
            {{"action": "alloc", "addr": 1, "size": 2**20, "time_us": t0, "frames": here}},
            {{"action": "free_completed", "addr": 1, "size": 2**20, "time_us": t0 + 1000}}]
        {extra}
        print("calls", torch.calls)
    """))
    return path


def test_device_branch_of_the_child(tmp_path):
    env = _fake(tmp_path)
    path = _script(tmp_path, "s.py", 512)
    m = run(RunSpec(path.read_text(), str(path), device="cuda", torch=True, timeline=True, env=env))
    assert m.status == "ok", m.stderr_tail
    assert m.memory == "device" and m.peak_bytes == 512 * 2**20 and m.reserved_bytes == 513 * 2**20
    assert m.device_name == "Fake GPU" and m.torch_version == "0.0-fake"
    calls = m.stdout_tail.split("calls ")[1]
    for call in ("manual_seed", "manual_seed_all", "init", "reset_peak", "history all"):
        assert repr(call) in calls
    (t0, allocated), (t1, freed) = m.timeline
    assert (allocated, freed) == (2**20, 0) and round(t1 - t0, 6) == 0.001


def test_device_out_of_memory(tmp_path):
    env = _fake(tmp_path)
    path = _script(tmp_path, "s.py", 300, "raise torch.cuda.OutOfMemoryError('CUDA out of memory')")
    m = run(RunSpec(path.read_text(), str(path), device="cuda", torch=True, env=env))
    assert m.status == "oom" and m.peak_bytes == 300 * 2**20 and "OutOfMemoryError" in m.error


def test_probe_and_cli_on_the_device(tmp_path):
    env = _fake(tmp_path)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env["PYTHONPATH"]
    try:
        found = probe()
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    assert found == {"python": found["python"], "torch": "0.0-fake", "cuda": True, "device_name": "Fake GPU",
                     "device_count": 1, "memory_free": 80 * 2**30, "torchrun": False}

    fixtures = tmp_path / "fixtures" / "MEM101-fake"
    fixtures.mkdir(parents=True)
    _script(fixtures, "before.py", 512)
    _script(fixtures, "after.py", 256)
    done = subprocess.run(
        [sys.executable, "-m", "memlint.verify", str(tmp_path / "fixtures"), "--repeat", "2", "-q",
         "--output-format", "json"],
        capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], str(ROOT)])}, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["device"] == {"kind": "cuda", "memory": "device", "torch": "0.0-fake", "name": "Fake GPU",
                              "count": 1, "runs": "runs forked from one process that imported torch once"}
    claim = data["results"][0]["claims"][0]
    assert (claim["verdict"], claim["before"], claim["after"], claim["ratio"]) == \
        ("confirmed", 512 * 2**20, 256 * 2**20, 0.5)
    where = data["results"][0]["peak_attribution"]
    assert where["before"]["lines"][0]["line"] == 4 and where["after"]["lines"][0]["original_line"] == 4
    plot = ["--plot", str(tmp_path / "gpu.png")] if importlib.util.find_spec("matplotlib") else []
    text = subprocess.run(
        [sys.executable, "-m", "memlint.verify", str(tmp_path / "fixtures"), "--repeat", "1", "-q", *plot],
        capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], str(ROOT)])}, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "CUDA device Fake GPU" in text.stdout and "512.0 MiB" in text.stdout and "256.0 MiB" in text.stdout
    assert "where the peak is" in text.stdout and "peak 1.0 MiB at before.py:4" in text.stdout  # from the history
    if plot:  # the device timelines come from extra runs with the allocator history on
        assert (tmp_path / "gpu.png").read_bytes()[:4] == b"\x89PNG"


def test_gpu_runs_are_forked_from_one_server_unless_turned_off(tmp_path):
    from memlint.verify.session import Options, measure_plan
    from memlint.verify.variants import Comparison, Plan, Program

    env = _fake(tmp_path)
    parent = "import os, torch\nprint(os.getppid())\n"
    plan = Plan([Comparison("MEM101", 3, "", "safe", ["peak-lower"], Program(parent, str(tmp_path / "a.py")),
                            Program(parent + "x = 1\n", str(tmp_path / "a.py")))])
    rows = measure_plan(plan, Options(device="cuda", repeat=2, env=env, jobs=2), stream=None)
    parents = {int(m.stdout_tail) for m in rows[0].before + rows[0].after}
    assert len(parents) == 1 and os.getpid() not in parents  # the fork server, for all four runs
    rows = measure_plan(plan, Options(device="cuda", repeat=1, env=env, fork=False), stream=None)
    assert {int(m.stdout_tail) for m in rows[0].before + rows[0].after} == {os.getpid()}


def test_every_gpu_is_measured_and_the_imbalance_judged(tmp_path):
    """Two GPUs: DataParallel-like before.py (device 0 holds 4x device 1) against an even
    after.py. The claim is judged on (largest - smallest) / largest, and the peak is the larger GPU's."""
    env = _fake(tmp_path)
    fixtures = tmp_path / "fixtures" / "MEM601-dataparallel"
    fixtures.mkdir(parents=True)
    _script(fixtures, "before.py", 0, "torch.cuda.peaks = {0: 512 * 2**20, 1: 128 * 2**20}")
    _script(fixtures, "after.py", 0, "torch.cuda.peaks = {0: 200 * 2**20, 1: 196 * 2**20}")
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "memlint.verify", str(tmp_path / "fixtures"), "--repeat", "2", "-q",
                           "--output-format", "json"], capture_output=True, text=True, cwd=ROOT, env=environment,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)["results"][0]
    claim = result["claims"][0]
    assert (claim["claim"], claim["metric"], claim["verdict"]) == ("imbalance-lower", "imbalance", "confirmed")
    assert claim["before"] == 0.75 and claim["after"] == 0.02
    assert result["devices"] == {"before": [[0, 512 * 2**20], [1, 128 * 2**20]],
                                 "after": [[0, 200 * 2**20], [1, 196 * 2**20]]}
    run = result["before_runs"][0]
    assert run["peak_bytes"] == 512 * 2**20 and run["devices"][1] == [1, 128 * 2**20, 129 * 2**20]
    text = subprocess.run([sys.executable, "-m", "memlint.verify", str(tmp_path / "fixtures"), "--repeat", "1", "-q"],
                          capture_output=True, text=True, cwd=ROOT, env=environment, timeout=120)
    assert "peak per GPU" in text.stdout
    assert "before cuda:0 512.0 MiB, cuda:1 128.0 MiB (imbalance 75%); " \
           "after cuda:0 200.0 MiB, cuda:1 196.0 MiB (imbalance 2%)" in text.stdout


def test_a_fixture_that_needs_more_gpus_than_there_are_is_skipped_not_refuted(tmp_path):
    """torchrun with two processes on a one-GPU machine: rank 1 would fail on a device that does
    not exist, which says nothing about the fix. The comparison is skipped, and says why."""
    env = _fake(tmp_path)
    (tmp_path / "fake" / "torch" / "distributed").mkdir()
    (tmp_path / "fake" / "torch" / "distributed" / "__init__.py").write_text("")
    (tmp_path / "fake" / "torch" / "distributed" / "run.py").write_text("raise SystemExit('not to be run')\n")
    fixtures = tmp_path / "fixtures"
    for name, launcher in (("MEM601-dataparallel", '[after]\nlauncher = "torchrun"\nnproc-per-node = 2\n'),
                           ("MEM101-fake", None)):
        (fixtures / name).mkdir(parents=True)
        _script(fixtures / name, "before.py", 512)
        _script(fixtures / name, "after.py", 256)
        if launcher:
            (fixtures / name / "verify.toml").write_text(launcher)
    done = subprocess.run([sys.executable, "-m", "memlint.verify", str(fixtures), "--repeat", "1", "-q",
                           "--output-format", "json"], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], str(ROOT)])})
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [r["fixture"] for r in data["results"]] == ["MEM101-fake"]
    assert data["skipped"] == [{"code": "MEM601", "line": None, "why": "MEM601-dataparallel: needs 2 GPUs "
                                "(torchrun --nproc-per-node 2); torch sees 1 here"}]
