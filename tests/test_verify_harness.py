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


def _gone(pid: int) -> bool:
    """The process ended (a zombie still being reaped counts as ended)."""
    for _ in range(50):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return False


# A script whose child leaves its session (setsid), as daemons do, then `{end}`.
ESCAPES = """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    open({pid_file!r}, "w").write(str(child.pid))
    print("started", flush=True)
    {end}
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="descendants are found in /proc")
@pytest.mark.parametrize("end, status", [("pass", "ok"), ("time.sleep(60)", "timeout"), ("os._exit(0)", "ok"),
                                         ("sys.exit(3)", "crash")],
                         ids=["exits", "times-out", "os-exit", "sys-exit"])
def test_a_child_that_left_the_session_does_not_outlive_the_run(tmp_path, end, status):
    pid_file = tmp_path / "escaped.pid"
    path = _script(tmp_path, ESCAPES.format(pid_file=str(pid_file), end=end))
    m = _run(path, timeout=5)
    assert m.status == status and m.stdout_tail == "started", m.stderr_tail
    assert _gone(int(pid_file.read_text())), "the setsid child outlived the run"


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


def test_a_sigkill_is_a_crash_not_out_of_memory_without_the_kernel_saying_so(tmp_path):
    m = _run(_script(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"))
    assert (m.status, m.exit_code) == ("crash", -signal.SIGKILL)
    assert m.summary() == "crashed (exit -9): killed by signal 9 (SIGKILL)"


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
    assert {k: m.grads[k] for k in ("where", "steps", "elements", "zero", "nonfinite")} == \
        {"where": "optimizer steps", "steps": 3, "elements": 3 * params, "zero": 2 * params, "nonfinite": 0}


# One training loop, four ways to clear the gradients: {reset} runs at the marked places.
LOOP = """
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = torch.randn(32, 16), torch.randint(0, 3, (32,))
    {above}
    for step in range(6):
        {before_backward}
        for micro in range({micro}):
            (torch.nn.functional.cross_entropy(model(x), y) * {scale}).backward()
        {between}
        opt.step()
        {after_step}
"""


def _loop(tmp_path, name, above="", before_backward="", between="", after_step="", micro=1, scale=1.0):
    path = _script(tmp_path, LOOP.format(above=above, before_backward=before_backward, between=between,
                                         after_step=after_step, micro=micro, scale=scale), name)
    m = _run(path, torch=True, grads=True)
    assert m.status == "ok", m.stderr_tail
    return m.grads


@needs_torch
def test_stale_gradients_grow_with_every_step_without_zero_grad(tmp_path):
    """zero_grad only above the loop: step k applies about k gradients, k - 1 of them stale."""
    grads = _loop(tmp_path, "stale.py", above="opt.zero_grad()")
    by_step = grads["error_by_step"]
    assert by_step[0] is None  # the first step is where the parameters are first seen
    assert [round(e) for e in by_step[1:6]] == [1, 2, 3, 4, 5]
    assert grads["checked_steps"] == 5 and grads["error"] == pytest.approx(3.0, rel=0.05)
    fixed = _loop(tmp_path, "fixed.py", above="opt.zero_grad()", after_step="opt.zero_grad(set_to_none=True)")
    assert fixed["checked_steps"] == 5 and fixed["error"] == 0.0


@needs_torch
def test_gradients_cleared_before_the_step_are_lost(tmp_path):
    grads = _loop(tmp_path, "lost.py", between="opt.zero_grad()")
    assert grads["checked_steps"] == 5 and grads["error"] == pytest.approx(1.0)
    zeroed = _loop(tmp_path, "zeroed.py", between="opt.zero_grad(set_to_none=False)")
    assert zeroed["error"] == pytest.approx(1.0)


@needs_torch
@pytest.mark.parametrize("way", [
    dict(before_backward="opt.zero_grad()"),
    dict(after_step="opt.zero_grad()", micro=4, scale=0.25),  # gradient accumulation
    dict(after_step="model.zero_grad()", scale=1024.0,  # a loss scaler's unscale_, then clipping
         between="[p.grad.div_(1024.0) for p in model.parameters()]; "
                 "torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)"),
], ids=["zero-grad-first", "accumulation", "unscale-and-clip"])
def test_right_gradients_have_no_error(tmp_path, way):
    grads = _loop(tmp_path, "right.py", **way)
    assert grads["checked_steps"] == 5 and grads["error"] == 0.0


@needs_torch
def test_gradient_health_at_exit_without_an_optimizer(tmp_path):
    path = _script(tmp_path, """
        import torch
        model = torch.nn.Linear(4, 1)
        (model(torch.ones(1, 4)) * float("inf")).sum().backward()
    """)
    m = _run(path, torch=True, grads=True)
    assert m.grads["where"] == "exit" and m.grads["elements"] == 5 and m.grads["nonfinite"] >= 4


def test_child_imports_nothing_of_memlint():
    """The child runs where libcst may be missing and must not add memlint to what it measures."""
    from memlint.verify.measure import CHILD

    for path in (CHILD, *(CHILD.with_name(f"{name}.py") for name in ("history", "tree", "loopclock"))):  # by path
        text = path.read_text()
        assert "import memlint" not in text and "from memlint" not in text


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


@pytest.mark.gpu
def test_gpu_history_names_the_innermost_script_line_at_the_peak(tmp_path):
    """The allocator's real history: frames innermost first, and the traced peak is the measured one."""
    path = _script(tmp_path, """
        import torch
        def noise(n):
            return torch.randn(n, n, device="cuda")
        kept = [noise(2048) for _ in range(3)]
        big = noise(4096)
        del kept
        print(big.sum().item() != 0)
    """)
    m = run(RunSpec(path.read_text(), str(path), device="cuda", torch=True, timeline=True))
    assert m.status == "ok", m.stderr_tail
    MiB = 2**20
    first = m.peak_at["lines"][0]
    assert (first["line"], first["function"], first["bytes"]) == (4, "noise", 3 * 16 * MiB + 64 * MiB)
    assert m.peak_at["bytes"] == m.peak_bytes and m.peak_at["unattributed"] == 0
    assert max(b for _, b in m.timeline) == m.peak_bytes
