"""Stopping memlint from outside: Ctrl-C, SIGTERM, SIGHUP, or SIGKILL of its main process
alone. Whatever stops it, no process of memlint's is left running (worker processes, the
script `memlint verify` runs), and a stopped --fix names the files it had already rewritten.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

from test_cli import BAD, FIXED, REPO, with_opt_in, write

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="processes are read from /proc")
# seconds of LibCST's parser, and a finding to fix: not settled until the fixes are made
SLOW = BAD + "for b in loader:\n    y = x" + ".f()" * 1400 + "\n"
WAIT = 120  # seconds anything may take, on a loaded machine


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0].decode()
    except (FileNotFoundError, ProcessLookupError):
        return "gone"


def _alive(pid: int) -> bool:
    return _state(pid) not in ("gone", "Z", "X")


def _children(pid: int) -> List[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as handle:
                    if int(handle.read().rsplit(b")", 1)[1].split()[1]) == pid:
                        found.append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    return found


def _until(condition, what: str, seconds: float = WAIT) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.05)


def _start(folder: Path, *args: str, output=subprocess.PIPE) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "memlint", *args], cwd=folder, env=env,
                            stdout=output, stderr=output, text=True)


def _unless_ignored(number: int) -> None:
    """Run under `nohup`, this process ignores SIGHUP and so does every memlint it starts, which
    keeps it ignored (memlint.interrupts): the signal cannot stop them, by design."""
    if signal.getsignal(number) is signal.SIG_IGN:
        pytest.skip(f"{signal.Signals(number).name} is ignored here (nohup?), and memlint keeps it ignored")


def _slow_tree(folder: Path, slow: int, fixable: int) -> None:
    for index in range(slow):
        write(folder, f"slow_{index}.py", SLOW)
    for index in range(fixable):
        write(folder, f"fix_{index}.py", BAD)


def _ended(pids: List[int], what: str) -> None:
    """Every one of `pids` ends soon after the run (those that do not are killed, and the test fails)."""
    try:
        _until(lambda: not any(_alive(pid) for pid in pids), what, 30)
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_the_run_and_its_workers_and_names_what_it_fixed(tmp_path, number):
    _unless_ignored(number)
    _slow_tree(tmp_path, slow=1, fixable=3)  # one worker stays on the slow file; the other fixes the rest
    process = _start(tmp_path, *with_opt_in(["--no-cache", "--fix", "-j", "2", "--file-timeout", "0", "."]))
    fixed = [tmp_path / f"fix_{index}.py" for index in range(3)]
    _until(lambda: all(path.read_text(encoding="utf-8") == FIXED for path in fixed), "the quick files to be fixed")
    workers = _children(process.pid)
    assert workers, "no worker process"
    process.send_signal(number)
    out, err = process.communicate(timeout=WAIT)
    assert process.returncode == 128 + number
    what = "interrupted" if number == signal.SIGINT else f"stopped by {signal.Signals(number).name}"
    assert err.startswith(f"memlint: error: {what}; fixes were written to 3 files: ") and err.count("\n") == 1
    assert sorted(err.strip().rsplit(": ", 1)[1].split(", ")) == ["fix_0.py", "fix_1.py", "fix_2.py"]
    assert out == ""
    _ended(workers, "the worker processes to end")
    assert (tmp_path / "slow_0.py").read_text(encoding="utf-8") == SLOW
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".memlint")]  # no temporary file left


@pytest.mark.parametrize("busy", [True, False], ids=["workers busy", "workers idle"])
def test_killing_only_the_main_process_leaves_no_worker(tmp_path, busy):
    _slow_tree(tmp_path, slow=3, fixable=0)
    process = _start(tmp_path, "--no-cache", "-j", "2", "--file-timeout", "0", ".", output=subprocess.DEVNULL)
    _until(lambda: len(_children(process.pid)) == 2, "two worker processes")
    workers = _children(process.pid)
    if not busy:  # the workers finish their file and wait for the next: blocked reading from the main process
        os.kill(process.pid, signal.SIGSTOP)
        _until(lambda: all(_state(pid) == "S" for pid in workers), "the workers to wait for work")
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=WAIT)
    _ended(workers, "the worker processes to end")


SLEEPER = """\
import os
import time

import torch

n = int("256")
total = 0.0
for step in range(2):
    noise = torch.randn(n, n)
    total += noise.sum().item()
with open(os.environ["MEMLINT_TEST_PID_FILE"], "w") as pid:
    pid.write(str(os.getpid()))
time.sleep(600)
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (the verify extra)")
@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_verify_stops_the_script_it_runs(tmp_path, number):
    _unless_ignored(number)
    write(tmp_path, "train.py", SLEEPER)
    pid_file = tmp_path / "script.pid"
    env = {**os.environ, "PYTHONPATH": str(REPO), "MEMLINT_TEST_PID_FILE": str(pid_file)}
    process = subprocess.Popen([sys.executable, "-m", "memlint", "verify", "train.py", "--device", "cpu",
                                "--repeat", "1", "-q", "--select", "MEM101"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _until(lambda: pid_file.exists() and pid_file.read_text(), "the script to start")
    script = int(pid_file.read_text())
    assert _alive(script)
    process.send_signal(number)
    out, err = process.communicate(timeout=WAIT)
    assert process.returncode == 128 + number, err
    what = "interrupted" if number == signal.SIGINT else f"stopped by {signal.Signals(number).name}"
    assert err == f"memlint verify: error: {what}\n"
    _ended([script], "the script to end")
