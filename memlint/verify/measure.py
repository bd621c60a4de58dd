"""The parent side of one verifier run: start the child, enforce the timeout, read its result.

Each run is a fresh process in its own session (process group). When it ends, or on timeout,
everything it started is killed, also what left its session (memlint.verify.tree). The
script's stdout and stderr go to files; the child reports its measurements as JSON through a
file (memlint.verify.child). Several runs may go at once from several threads. This module
never imports torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from memlint import hostmemory
from memlint.verify import tree

CHILD = Path(__file__).with_name("child.py")
TAIL_LINES = 15
SAMPLE_SECONDS = 0.005  # host RSS sampling period when a timeline is wanted on the CPU


@dataclass
class RunSpec:
    source: str  # the code to run
    path: str  # the path it runs as (__file__, sys.argv[0], sys.path[0])
    argv: Sequence[str] = ()
    device: str = "cpu"  # "cuda" or "cpu"
    seed: int = 0
    timeout: float = 300.0
    torch: bool = True  # import and seed torch before the script
    grads: bool = False  # count zero / non-finite gradients at optimizer steps
    timeline: bool = False  # record memory over time and where the peak is (slows the run: not for timing)
    env: Dict[str, str] = field(default_factory=dict)
    launcher: Optional["Launcher"] = None  # None: `python SCRIPT`
    loops: Sequence[Sequence[int]] = ()  # [line, tick, end] of loops to time per iteration (memlint.verify.loops)


@dataclass(frozen=True)
class Launcher:
    """How a script is started: `torchrun --nproc-per-node N` (the only launcher so far)."""

    name: str
    nproc_per_node: Optional[int]  # None: one per GPU (the verifier counts them before running)

    def command(self, python: str) -> List[str]:
        """The launcher's command line, to which the child and its spec are appended. torchrun is run
        as `python -m torch.distributed.run`, so that it is the interpreter's own; `--standalone`
        picks a free port, so that runs side by side do not meet."""
        return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={self.nproc_per_node}"]

    def describe(self) -> str:
        return f"{self.name} --nproc-per-node {self.nproc_per_node}"


@dataclass
class Measurement:
    status: str  # ok | crash | oom | timeout | error (the harness could not run it)
    exit_code: Optional[int]
    memory: str  # "device" (CUDA allocator) or "host" (resident set size)
    peak_bytes: Optional[int]  # the peak the script added: device max allocated, or RSS above start
    reserved_bytes: Optional[int] = None  # device max reserved
    seconds: Optional[float] = None
    stdout_sha256: str = ""
    stdout_tail: str = ""
    stderr_tail: str = ""
    error: str = ""  # one line: the exception, or why the harness failed
    grads: Optional[dict] = None
    rss_peak_bytes: Optional[int] = None  # absolute peak RSS of the child
    device_name: str = ""
    torch_version: str = ""
    timeline: Optional[List[List[float]]] = None  # [[seconds since the script started, bytes]]
    peak_at: Optional[dict] = None  # the script's lines holding the most at the peak (memlint.verify.history)
    wall_seconds: Optional[float] = None  # the whole child process: start, torch import, CUDA init, script, exit
    overhead: Optional[dict] = None  # seconds outside the script: import_torch, cuda_init, exit
    devices: Optional[List[List[int]]] = None  # per visible GPU: [index, max allocated, max reserved]
    processes: int = 1  # processes that ran the script (a launcher starts several)
    loops: Optional[List[dict]] = None  # per timed loop: line, iterations, warmup, per_iteration (s), first (s)

    def per_iteration(self, line: int) -> Optional[float]:
        """Steady-state seconds per iteration of the loop starting at `line`, if it was timed and
        ran long enough."""
        return next((loop["per_iteration"] for loop in self.loops or () if loop["line"] == line), None)

    def imbalance(self) -> Optional[float]:
        """(largest - smallest) / largest of the peaks of the GPUs the run used; 0 is even, 1 is
        all on one. None when fewer than two GPUs were used."""
        used = [peak for _, peak, _ in self.devices or () if peak > 0]
        if len(used) < 2:
            return None
        return (max(used) - min(used)) / max(used)

    def what(self) -> str:
        """What happened to a failed run: `crashed (exit 1)`, `timed out`, ..."""
        return {"timeout": "timed out", "oom": "ran out of memory", "error": "could not be run"}.get(
            self.status, f"crashed (exit {self.exit_code})")

    def detail(self) -> str:
        """Why it failed, as the child or the parent saw it (never a guess from stderr)."""
        return self.error

    def summary(self) -> str:
        """One line for a failed run: what happened and why."""
        return f"{self.what()}: {self.detail()}" if self.detail() else self.what()


def _tail(data: bytes) -> str:
    lines = data.decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-TAIL_LINES:])


def _rss_of(pid: int) -> Tuple[Optional[int], Optional[int]]:
    """(current RSS, peak RSS) of a running process, from /proc (Linux); None where unknown."""
    found = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    found[line[:5]] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return found.get("VmRSS"), found.get("VmHWM")


def oom_kills() -> Optional[int]:
    """How many processes the kernel's OOM killer has killed since boot (Linux 4.13+), or None."""
    try:
        with open("/proc/vmstat", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


running: Set[int] = set()  # children started on purpose (runs, a fork server) that have not ended
running_lock = threading.Lock()
_adopting = False


def adopt_orphans() -> bool:
    """Make this process a subreaper, so that what a run leaves behind after its child died
    (killed by the kernel, say) comes back here and is killed when the run ends. For the
    `memlint verify` process; a library caller may leave it off."""
    global _adopting
    _adopting = _adopting or tree.become_subreaper()
    return _adopting


def kill_tree(pid: int) -> None:
    """Everything below the child while it still lives (it is a subreaper: that includes what
    left its session), then its process group and the child itself."""
    tree.kill_descendants(pid)
    _kill_group(pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_running() -> None:
    """Kill every run still going (on Ctrl-C, from the thread that got it)."""
    with running_lock:
        pids = list(running)
    for pid in pids:
        kill_tree(pid)


def _after_exit(pid: int) -> None:
    _kill_group(pid)  # what the script left behind in its group (workers, daemons)
    if _adopting:
        with running_lock:
            keep = set(running)
        tree.kill_orphans(keep)


HEARTBEAT_SECONDS = 30.0


def _wait(proc, timeout: float, sample: bool,
          heartbeat: Optional[Callable[[float], None]] = None):
    """(exit code, last peak RSS seen, timed out, [[wall time, rss]]) of a Popen or a Forked.

    The peak seen by polling is a fallback for a child that dies without reporting its own.
    """
    started = time.monotonic()
    deadline = started + timeout
    next_beat = started + HEARTBEAT_SECONDS
    samples: List[List[float]] = []
    peak = None
    timed_out = False
    while proc.poll() is None:
        now = time.monotonic()
        if heartbeat is not None and now > next_beat:
            heartbeat(now - started)
            next_beat += HEARTBEAT_SECONDS
        if now > deadline:
            kill_tree(proc.pid)
            proc.wait()
            timed_out = True
            break
        rss, hwm = _rss_of(proc.pid)
        peak = hwm if hwm is not None else peak
        if sample and rss is not None:
            samples.append([time.time(), rss])
        time.sleep(SAMPLE_SECONDS if sample else 0.02)
    return proc.returncode, peak, timed_out, samples


def child_env(spec: RunSpec) -> Dict[str, str]:
    """The environment of a run: the user's, with the seed for str hashes and the spec's own."""
    env = {**os.environ, "PYTHONHASHSEED": str(spec.seed), "PYTHONUNBUFFERED": "1", **spec.env}
    if spec.device != "cuda":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the script's own device choice falls to the CPU
    return env


def run(spec: RunSpec, python: str = sys.executable, heartbeat: Optional[Callable[[float], None]] = None,
        server=None) -> Measurement:
    """Run the spec once in a fresh child process and measure it.

    `heartbeat(seconds)` is called every HEARTBEAT_SECONDS while the child is still running.
    `server`: a memlint.verify.forkserver.ForkServer started with this spec's child_env, to
    fork the child from (a plain process is started if it fails).
    """
    memory = "device" if spec.device == "cuda" else "host"
    with tempfile.TemporaryDirectory(prefix="memlint-verify-") as tmp:
        folder = Path(tmp)
        (folder / "source.py").write_text(spec.source, encoding="utf-8")
        result_file = folder / "result.json"
        (folder / "spec.json").write_text(json.dumps({
            "source_file": str(folder / "source.py"), "path": os.path.abspath(spec.path),
            "argv": list(spec.argv), "device": spec.device, "seed": spec.seed, "torch": spec.torch,
            "grads": spec.grads, "timeline": spec.timeline and spec.device == "cuda",
            "result_file": str(result_file), "launcher": spec.launcher.name if spec.launcher else None,
            "loops": [list(loop) for loop in spec.loops],
        }), encoding="utf-8")
        with open(folder / "stdout", "wb") as out, open(folder / "stderr", "wb") as err:
            kills = oom_kills()  # a SIGKILL is the OOM killer's only if it killed meanwhile
            started = time.monotonic()
            with running_lock:  # registered before it can leave anything to adopt
                proc = server.spawn(str(folder / "spec.json"), str(folder / "stdout"), str(folder / "stderr")) \
                    if server is not None and spec.launcher is None else None
                start = spec.launcher.command(python) if spec.launcher is not None else [python]
                try:
                    proc = proc or subprocess.Popen([*start, str(CHILD), str(folder / "spec.json")],
                                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                                    env=child_env(spec), start_new_session=True)
                except OSError as error:
                    return Measurement("error", None, memory, None, error=f"cannot start {python}: {error}")
                running.add(proc.pid)
            sample = spec.timeline and memory == "host"
            try:
                code, polled_peak, timed_out, samples = _wait(proc, spec.timeout, sample, heartbeat)
                ended = time.time()
            except BaseException:  # Ctrl-C: the child is in its own session and would not get it
                kill_tree(proc.pid)
                proc.wait()
                raise
            finally:
                with running_lock:
                    running.discard(proc.pid)
                _after_exit(proc.pid)
            wall = time.monotonic() - started
        stdout = (folder / "stdout").read_bytes()
        stderr = (folder / "stderr").read_bytes()
        result = _read_result(result_file) if spec.launcher is None else \
            merge_ranks([_read_result(path) for path in sorted(folder.glob("result.json.*"), key=_rank)])
    killed_for_memory = kills is not None and (oom_kills() or 0) > kills
    measurement = _measurement(spec, memory, result, code, polled_peak, timed_out, samples, stdout, stderr,
                               killed_for_memory)
    measurement.wall_seconds = wall
    if measurement.overhead is not None and result.get("wall_end"):
        measurement.overhead["exit"] = max(0.0, ended - result["wall_end"])
    return measurement


def _read_result(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _rank(path: Path) -> int:
    suffix = path.name.rpartition(".")[2]
    return int(suffix) if suffix.isdigit() else -1


_WORST_FIRST = ("error", "oom", "crash", "started", "ok")
_SIGNALS = {number.value for number in signal.Signals}


def merge_ranks(results: Sequence[dict]) -> dict:
    """One result for the processes a launcher started (rank 0 first): the worst status (with
    its error), the longest time, host memory added up, and each GPU's peak as the sum of every
    process's peak on it (exact when each GPU is one process's, as under DDP; an upper bound
    otherwise). Where the peak is, memory over time and gradients are rank 0's."""
    if not results:
        return {}
    merged = dict(results[0])
    worst = min(results, key=lambda r: _WORST_FIRST.index(r.get("status", "started"))
                if r.get("status", "started") in _WORST_FIRST else 0)
    for key in ("status", "error", "exit_code", "note"):
        if key in worst:
            merged[key] = worst[key]
    seconds = [r["seconds"] for r in results if r.get("seconds") is not None]
    merged["seconds"] = max(seconds) if seconds else None
    for key in ("rss_start", "rss_peak"):
        values = [r.get(key) for r in results]
        merged[key] = sum(values) if all(v is not None for v in values) else None  # type: ignore[arg-type]
    per_device: Dict[int, List[int]] = {}
    for result in results:
        for index, peak, reserved in result.get("devices") or ():
            total = per_device.setdefault(index, [index, 0, 0])
            total[1] += peak
            total[2] += reserved
    if per_device:
        merged["devices"] = [per_device[index] for index in sorted(per_device)]
        merged["device_peak"] = max(peak for _, peak, _ in merged["devices"])
        merged["device_reserved"] = max(reserved for _, _, reserved in merged["devices"])
    merged["processes"] = len(results)
    return merged


def _measurement(spec: RunSpec, memory: str, result: dict, code: int, polled_peak: Optional[int],
                 timed_out: bool, samples: List[List[float]], stdout: bytes, stderr: bytes,
                 killed_for_memory: bool = False) -> Measurement:
    status = result.get("status", "started")
    if timed_out:
        status = "timeout"
    elif status == "started" and code == 0:  # os._exit(0): finished, but only the parent measured it
        status = "ok"
        result["note"] = "the script left through os._exit; measured from outside only"
    elif status == "started":  # the child died without reporting: killed by a signal, the OOM killer's or another's
        status = "oom" if code == -signal.SIGKILL and killed_for_memory else "crash"
    rss_start = result.get("rss_start")
    rss_peak = result.get("rss_peak") or polled_peak
    if memory == "device":  # the most loaded GPU's peak (the one that runs out first)
        devices = result.get("devices")
        peak = max(p for _, p, _ in devices) if devices else result.get("device_peak")
    else:
        peak = max(0, rss_peak - rss_start) if rss_peak is not None and rss_start is not None else None
    timeline = result.get("timeline")
    if memory == "host" and samples and rss_start is not None:
        start = result.get("wall_start", samples[0][0])
        end = result.get("seconds")
        timeline = [[t - start, max(0, rss - rss_start)] for t, rss in samples
                    if end is None or t - start <= end + SAMPLE_SECONDS]
    error = result.get("error", "")
    if status == "timeout":
        error = f"no result after {spec.timeout:g} s; its process group was killed"
    elif status == "oom" and not error:
        error = "killed by the kernel's OOM killer (SIGKILL)"
    elif status != "ok" and not error and code is not None and code < 0:
        error = f"killed by signal {-code}" + (f" ({signal.Signals(-code).name})" if -code in _SIGNALS else "")
    elif status != "ok" and not error and code:
        error = f"the process exited with status {code} before the script finished (os._exit, or Python failed)"
    return Measurement(
        status=status, exit_code=code if not timed_out else None, memory=memory, peak_bytes=peak,
        reserved_bytes=result.get("device_reserved"), seconds=result.get("seconds"),
        stdout_sha256=hashlib.sha256(stdout).hexdigest(), stdout_tail=_tail(stdout),
        stderr_tail=_tail(stderr), error=error + (f" ({result['note']})" if result.get("note") else ""),
        grads=result.get("grads"), rss_peak_bytes=rss_peak, device_name=result.get("device_name", ""),
        torch_version=result.get("torch", ""), timeline=timeline, peak_at=result.get("peak_at"),
        overhead=result.get("overhead"), devices=result.get("devices"), processes=result.get("processes", 1),
        loops=result.get("loops"),
    )


def host_available() -> Optional[int]:
    """Bytes of host memory available now (Linux MemAvailable), or None."""
    return hostmemory.available()


def probe(python: str = sys.executable, timeout: float = 120.0) -> dict:
    """What the child interpreter offers: {"torch": version or None, "cuda": bool, "device_name",
    "memory_free": bytes free on the device}."""
    try:
        done = subprocess.run([python, str(CHILD), "--probe"], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as error:
        return {"torch": None, "cuda": False, "unusable": f"cannot run {python}: {error}"}
