"""Runs forked from the fork server behave as fresh processes: __main__, args, seeds, exit codes,
tracebacks, timeouts, and nothing left running; torch is imported once, not per run."""

from __future__ import annotations

import functools
import importlib.util
import os
import signal
import sys
import textwrap
import time

import pytest

from memlint.verify.forkserver import ForkServer
from memlint.verify.measure import RunSpec, child_env, run

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (the verify extra)"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and /proc")]


@pytest.fixture(scope="module")
def server():
    started, why = ForkServer.start(sys.executable, child_env(RunSpec("", "x.py")))
    assert started is not None and why == "", why
    yield started
    started.close()


def _ended(pid: int) -> bool:
    """Gone, or a zombie waiting to be reaped; kills it (and fails) if still running after 5 s."""
    for _ in range(50):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return False


def _run(server, tmp_path, body, **kwargs):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    kwargs.setdefault("torch", True)
    return run(RunSpec(path.read_text(), str(path), **kwargs), server=server), path


def test_a_forked_run_is_the_script_as_main_seeded_like_a_fresh_one(server, tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 41\n")
    body = """
        import random, sys, torch
        import helper
        print(__name__, sys.argv[1:], helper.VALUE + 1, random.random(), hash("memlint"), torch.rand(2).tolist())
    """
    forked, path = _run(server, tmp_path, body, argv=["--steps", "3"])
    fresh = run(RunSpec(path.read_text(), str(path), argv=["--steps", "3"]))
    assert forked.status == fresh.status == "ok", forked.stderr_tail
    assert forked.stdout_tail == fresh.stdout_tail and forked.stdout_tail.startswith("__main__ ['--steps', '3'] 42 ")
    assert forked.overhead["import_torch"] < 0.5 < fresh.overhead["import_torch"]  # imported once, by the server


def test_exit_codes_tracebacks_and_signals_of_forked_runs(server, tmp_path):
    m, _ = _run(server, tmp_path, "import sys\nprint('x', file=sys.stderr)\nsys.exit(4)\n")
    assert (m.status, m.exit_code, m.error) == ("crash", 4, "the script called sys.exit(4)")
    m, _ = _run(server, tmp_path, "def f():\n    raise KeyError('boom')\nf()\n")
    assert m.status == "crash" and m.exit_code == 1 and m.stderr_tail.endswith("KeyError: 'boom'")
    m, _ = _run(server, tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert m.status == "crash" and m.exit_code == -signal.SIGSEGV
    m, _ = _run(server, tmp_path, "import os\nprint('bye', flush=True)\nos._exit(0)\n")
    assert m.status == "ok" and m.stdout_tail == "bye"


def test_a_forked_run_that_times_out_is_killed_with_what_left_its_session(server, tmp_path):
    pid_file = tmp_path / "escaped.pid"
    m, _ = _run(server, tmp_path, f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(60)
    """, timeout=3)
    assert m.status == "timeout" and m.stdout_tail == "started"
    assert _ended(int(pid_file.read_text())), "the setsid child of a forked run outlived it"


def test_runs_side_by_side_from_one_server(server, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    folders = [tmp_path / f"r{i}" for i in range(3)]
    for folder in folders:
        folder.mkdir()
    go = functools.partial(_run, server, body="import os, time\ntime.sleep(0.5)\nprint(os.getpid())\n")
    with ThreadPoolExecutor(3) as pool:
        done = [m for m, _ in pool.map(go, folders)]
    assert [m.status for m in done] == ["ok"] * 3 and len({m.stdout_tail for m in done}) == 3


def test_closing_the_server_kills_its_running_children(tmp_path):
    own, _ = ForkServer.start(sys.executable, child_env(RunSpec("", "x.py")))
    pid_file = tmp_path / "run.pid"
    path = tmp_path / "s.py"
    path.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    proc = own.spawn(str(_spec_file(tmp_path, path)), str(tmp_path / "out"), str(tmp_path / "err"))
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    own.close()
    assert proc.poll() is not None
    assert _ended(int(pid_file.read_text()))


def _spec_file(folder, script):
    import json

    spec = folder / "spec.json"
    spec.write_text(json.dumps({"source_file": str(script), "path": str(script), "argv": [], "device": "cpu",
                                "seed": 0, "torch": False, "result_file": str(folder / "result.json")}))
    return spec


def test_a_server_that_cannot_serve_says_why(tmp_path):
    (tmp_path / "torch.py").write_text("raise ImportError('simulated: no torch here')\n")
    env = {**child_env(RunSpec("", "x.py")), "PYTHONPATH": str(tmp_path)}
    server, why = ForkServer.start(sys.executable, env)
    assert server is None and "ImportError: simulated: no torch here" in why


def test_the_server_imports_what_the_first_optimizer_would(server, tmp_path):
    """Constructing the first optimizer imports torch._dynamo (seconds, in every run); the server
    imports it once."""
    assert server.preloaded == ["torch._dynamo"]
    m, _ = _run(server, tmp_path, "import sys\nprint('torch._dynamo' in sys.modules)\n")
    assert m.status == "ok" and m.stdout_tail == "True", m.stderr_tail


FAKE_TORCH = """\
__version__ = "0.0-fake"
{load}


def manual_seed(seed):
    pass


class cuda:
    is_available = staticmethod(lambda: False)
    is_initialized = staticmethod(lambda: False)
"""

DRIVER = """\
static int started = 0;
int cuInit(unsigned int flags) {{ started = 1; return 0; }}
int cuDeviceGetCount(int *count) {{ *count = 1; return started ? 0 : {answer}; }}
"""


def _fake_torch(tmp_path, load="", dynamo=""):
    package = tmp_path / "fake" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_TORCH.format(load=load))
    (package / "optim.py").write_text("")
    (package / "_dynamo.py").write_text(dynamo)
    return {**child_env(RunSpec("", "x.py")), "PYTHONPATH": str(tmp_path / "fake")}


def _driver(tmp_path, answer):
    """A stand-in CUDA driver library: cuDeviceGetCount answers `answer` until cuInit is called."""
    import subprocess

    (tmp_path / "driver.c").write_text(DRIVER.format(answer=answer))
    library = tmp_path / "lib" / "libcuda.so.1"
    library.parent.mkdir()
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(tmp_path / "driver.c")], check=True)
    return f"import ctypes\n_driver = ctypes.CDLL({str(library)!r})\n"


def test_threads_left_by_an_import_are_no_reason_not_to_fork(tmp_path):
    """numpy's BLAS starts a thread per core when imported, and stops them before a fork."""
    env = _fake_torch(tmp_path, load="import threading, time\n"
                                     "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    own, why = ForkServer.start(sys.executable, env)
    try:
        assert own is not None and why == "" and own.preloaded == ["torch._dynamo"]
    finally:
        if own is not None:
            own.close()


needs_cc = pytest.mark.skipif(not __import__("shutil").which("cc"), reason="needs a C compiler for a stand-in driver")


@needs_cc
@pytest.mark.parametrize("answer, serves", [(3, True), (0, False)])
def test_a_driver_library_loaded_by_the_import_is_no_reason_not_to_fork(tmp_path, answer, serves):
    """Some CUDA builds of torch load libcuda while being imported but do not start it
    (cuDeviceGetCount answers 3, "not initialised"): forking is safe then. Once started (0), not."""
    env = _fake_torch(tmp_path, load=_driver(tmp_path, answer))
    own, why = ForkServer.start(sys.executable, env)
    try:
        assert (own is not None) is serves, why
        assert why == ("" if serves else "importing torch started CUDA")
    finally:
        if own is not None:
            own.close()


@needs_cc
def test_a_preload_that_starts_cuda_is_left_to_each_run(tmp_path):
    env = _fake_torch(tmp_path, load=_driver(tmp_path, 3), dynamo="import torch\ntorch._driver.cuInit(0)\n")
    own, why = ForkServer.start(sys.executable, env)
    try:
        assert own is not None and why == "" and own.preloaded == []  # started again, without it
    finally:
        if own is not None:
            own.close()
