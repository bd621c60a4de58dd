"""The verifier's harness: the child runs a script as __main__, seeded, measured, killed on timeout."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import textwrap
import time

import pytest

from memlint.verify.measure import RunSpec, run

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch (the verify extra)")


def _script(tmp_path, body: str, name: str = "script.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def _run(path, **kwargs):
    kwargs.setdefault("torch", False)
    return run(RunSpec(path.read_text(), str(path), **kwargs))


def test_script_runs_as_main_with_its_args_and_folder(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 41\n")
    path = _script(tmp_path, """
        import sys
        import helper
        print(__name__, sys.argv[1:], helper.VALUE + 1, __file__)
    """)
    m = _run(path, argv=["--steps", "3"])
    assert m.status == "ok" and m.exit_code == 0, m.stderr_tail
    assert m.stdout_tail == f"__main__ ['--steps', '3'] 42 {path}"
    assert m.seconds is not None and m.memory == "host"


def test_variant_source_runs_under_the_original_path(tmp_path):
    path = _script(tmp_path, "print('original')\n")
    m = run(RunSpec("import sys\nprint('variant', sys.argv[0])\n", str(path), torch=False))
    assert m.stdout_tail == f"variant {path}"


def test_random_is_seeded_the_same_in_every_run(tmp_path):
    path = _script(tmp_path, "import random\nprint(random.random(), hash('memlint'))\n")
    first, second = _run(path), _run(path)
    assert first.stdout_tail == second.stdout_tail
    assert first.stdout_sha256 == second.stdout_sha256
    import random

    random.seed(0)
    assert first.stdout_tail.split()[0] == repr(random.random())


@needs_torch
def test_torch_is_seeded(tmp_path):
    path = _script(tmp_path, "import torch\nprint(torch.rand(3).tolist())\n")
    m = _run(path, torch=True)
    assert m.status == "ok", m.stderr_tail
    assert m.torch_version
    import torch

    torch.manual_seed(0)
    assert m.stdout_tail == str(torch.rand(3).tolist())


def test_timeout_kills_the_whole_process_group(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    path = _script(tmp_path, f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(60)
    """)
    started = time.monotonic()
    m = _run(path, timeout=1.5)
    assert time.monotonic() - started < 15
    assert m.status == "timeout" and m.exit_code is None
    assert "killed" in m.error and m.stdout_tail == "started"
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # the kernel reaps it shortly after SIGKILL
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        try:
            os.waitpid(grandchild, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    else:
        os.kill(grandchild, signal.SIGKILL)
        pytest.fail("the script's own child outlived the timeout")


def test_crash_is_captured_with_exit_code_and_stderr_tail(tmp_path):
    path = _script(tmp_path, """
        print("step 1")
        def train():
            raise ValueError("loss is nan")
        train()
    """)
    m = _run(path)
    assert m.status == "crash" and m.exit_code == 1
    assert m.error == "ValueError: loss is nan"
    assert "Traceback" in m.stderr_tail and m.stderr_tail.endswith("ValueError: loss is nan")
    assert "child.py" not in m.stderr_tail  # the harness's own frame is not shown
    assert m.stdout_tail == "step 1"
    assert "crashed (exit 1)" in m.summary()


def test_exit_codes_and_signals(tmp_path):
    assert _run(_script(tmp_path, "import sys\nsys.exit(0)\n")).status == "ok"
    m = _run(_script(tmp_path, "import sys\nsys.exit(4)\n"))
    assert (m.status, m.exit_code) == ("crash", 4)
    m = _run(_script(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"))
    assert m.status == "crash" and m.exit_code == -signal.SIGSEGV and "signal" in m.error


def test_out_of_memory_is_a_measurement(tmp_path):
    m = _run(_script(tmp_path, "raise MemoryError('no room')\n"))
    assert m.status == "oom" and "ran out of memory" in m.summary()


def test_traceback_shows_the_variant_lines(tmp_path):
    path = _script(tmp_path, "x = 1\n")
    m = run(RunSpec("y = 2\nraise KeyError('variant line')\n", str(path), torch=False))
    assert "raise KeyError('variant line')" in m.stderr_tail


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="host RSS is read from /proc")
@needs_torch
def test_host_rss_sees_two_tensors_alive_and_one_after_the_fix(tmp_path):
    body = """
        import torch
        {setup}
        for step in range(4):
            {line}
            total = x.sum().item()
    """
    before = _script(tmp_path, body.format(setup="", line="x = torch.randn(4096, 4096)"), "before.py")
    after = _script(tmp_path, body.format(setup="x = torch.empty(4096, 4096)", line="x.normal_()"), "after.py")
    mb, ma = _run(before, torch=True, timeline=True), _run(after, torch=True)
    assert mb.status == ma.status == "ok", (mb.stderr_tail, ma.stderr_tail)
    tensor = 4096 * 4096 * 4  # 64 MiB
    assert mb.peak_bytes >= 1.8 * tensor  # two alive at the rebinding
    assert ma.peak_bytes <= 1.3 * tensor
    assert mb.timeline and max(b for _, b in mb.timeline) <= mb.peak_bytes + 2**20


@needs_torch
def test_gradient_health_is_counted_at_optimizer_steps(tmp_path):
    path = _script(tmp_path, """
        import torch
        model = torch.nn.Linear(8, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            loss = model(torch.randn(2, 8)).sum() * (0.0 if step else 1.0)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """)
    m = _run(path, torch=True, grads=True)
    assert m.status == "ok", m.stderr_tail
    params = 8 * 4 + 4
    assert m.grads == {"where": "optimizer steps", "steps": 3, "elements": 3 * params,
                       "zero": 2 * params, "nonfinite": 0}


@needs_torch
def test_gradient_health_at_exit_without_an_optimizer(tmp_path):
    path = _script(tmp_path, """
        import torch
        model = torch.nn.Linear(4, 1)
        (model(torch.ones(1, 4)) * float("inf")).sum().backward()
    """)
    m = _run(path, torch=True, grads=True)
    assert m.grads["where"] == "exit" and m.grads["elements"] == 5 and m.grads["nonfinite"] >= 4


def _child_module():
    import importlib.util

    from memlint.verify.measure import CHILD

    spec = importlib.util.spec_from_file_location("memlint_verify_child_under_test", CHILD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_child_imports_nothing_of_memlint():
    """The child runs where libcst may be missing and must not add memlint to what it measures."""
    from memlint.verify.measure import CHILD

    text = CHILD.read_text()
    assert "import memlint" not in text and "from memlint" not in text


def test_cuda_timeline_from_allocator_history_is_anchored_and_thinned():
    """The GPU plot's data path, fed a fake allocator history (no GPU needed)."""
    from types import SimpleNamespace

    child = _child_module()
    start = 1_700_000_000.0
    trace = [{"action": "alloc", "size": 100, "time_us": int((start + 0.1) * 1e6)},
             {"action": "segment_alloc", "size": 4096, "time_us": int((start + 0.1) * 1e6)},
             {"action": "alloc", "size": 100, "time_us": int((start + 0.2) * 1e6)},
             {"action": "free_requested", "size": 100, "time_us": int((start + 0.3) * 1e6)},
             {"action": "free_completed", "size": 100, "time_us": int((start + 0.3) * 1e6)}]
    memory = SimpleNamespace(_snapshot=lambda: {"device_traces": [trace]})
    fake = SimpleNamespace(cuda=SimpleNamespace(memory=memory, current_device=lambda: 0,
                                                memory_allocated=lambda: 150))
    points = child._cuda_timeline(fake, start)
    assert [round(t, 3) for t, _ in points] == [0.1, 0.2, 0.3]
    assert [b for _, b in points] == [150, 250, 150]  # anchored: 50 bytes were allocated before
    many = [[float(i), i % 7] for i in range(20000)]
    thinned = child._thin(many)
    assert len(thinned) == child.TIMELINE_POINTS and max(b for _, b in thinned) == 6


def test_a_long_run_sends_heartbeats(tmp_path, monkeypatch):
    from memlint.verify import measure

    monkeypatch.setattr(measure, "HEARTBEAT_SECONDS", 0.2)
    beats = []
    path = _script(tmp_path, "import time\ntime.sleep(1.0)\n")
    m = run(RunSpec(path.read_text(), str(path), torch=False), heartbeat=beats.append)
    assert m.status == "ok" and len(beats) >= 2 and beats == sorted(beats)


def test_missing_interpreter_is_a_harness_error(tmp_path):
    path = _script(tmp_path, "print(1)\n")
    m = run(RunSpec(path.read_text(), str(path), torch=False), python=str(tmp_path / "no-python"))
    assert m.status == "error" and "cannot start" in m.error


def test_interrupting_the_parent_kills_the_child(tmp_path, monkeypatch):
    from memlint.verify import measure

    pid_file = tmp_path / "child.pid"
    path = _script(tmp_path, f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                             "time.sleep(60)\n")

    def interrupt(seconds):
        if pid_file.exists() and pid_file.read_text():
            raise KeyboardInterrupt

    monkeypatch.setattr(measure, "HEARTBEAT_SECONDS", 0.2)
    with pytest.raises(KeyboardInterrupt):
        run(RunSpec(path.read_text(), str(path), torch=False, timeout=30), heartbeat=interrupt)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_os_exit_zero_is_a_finished_run(tmp_path):
    m = _run(_script(tmp_path, "import os\nprint('bye', flush=True)\nos._exit(0)\n"))
    assert m.status == "ok" and m.stdout_tail == "bye" and "os._exit" in m.error
    m = _run(_script(tmp_path, "import os\nos._exit(5)\n"))
    assert m.status == "crash" and m.exit_code == 5
