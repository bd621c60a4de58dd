"""The child side of a verifier run: run one script as `__main__` and measure it.

Started by memlint.verify.measure as `python child.py SPEC.json`, by path, so that it imports
nothing of memlint (and not libcst): only the standard library, its stdlib-only siblings
history.py, tree.py and loopclock.py (loaded by path), and, lazily, torch. The spec
names the source to run, the path it runs as, its argv, the device, the seed and where to write
the result. The result is JSON, written once before the script starts (so a crash still leaves
the starting RSS) and again when it ends. Whatever the script started is killed when it ends.
"""

import gc
import json
import linecache
import os
import sys
import time
import traceback
import types

HISTORY_ENTRIES = 1_000_000  # the allocator's history keeps the newest this many events


def _write(path, result):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    os.replace(tmp, path)


def _rss_now():
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _status_field(name):
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_rss_peak():
    """Reset the kernel's peak RSS (VmHWM) so that it counts from now (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _rss_peak():
    """Peak RSS of this process image; ru_maxrss would include the parent's RSS before exec."""
    peak = _status_field("VmHWM")
    if peak is not None:
        return peak
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _seed(seed, torch):
    import random

    random.seed(seed)
    try:
        import importlib.util

        if importlib.util.find_spec("numpy") is not None:
            import numpy

            numpy.random.seed(seed)
    except Exception:  # a broken numpy must not stop the run
        pass
    if torch is not None:
        torch.manual_seed(seed)  # seeds every CUDA device too
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(seed)


def _sibling(name):
    """memlint/verify/<name>.py, loaded by path under a private name (no memlint import, and no
    clash with a module of the script's own called the same)."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(f"_memlint_verify_{name}", os.path.join(here, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SERIES = 64  # per-step gradient errors kept for the report (the mean covers every step)


class _Param:
    """One parameter's state between two optimizer steps, seen by a hook on the parameter."""

    __slots__ = ("param", "fresh", "own", "stale")

    def __init__(self, param):
        self.param = param
        self.fresh = True  # no backward has reached it since the last step
        self.own = None  # squared norm of the first backward's contribution after the step
        self.stale = None  # squared norm of what .grad already held then


def _norm2(torch, tensor):
    if tensor.dtype not in (torch.float32, torch.float64):
        return torch.linalg.vector_norm(tensor, dtype=torch.float32).square()
    return torch.linalg.vector_norm(tensor).float().square()


def _plus(total, value):
    if value is None:
        return total
    return value if total is None else total + value.to(total.device)


class _Grads:
    """Gradient health at every optimizer step (a global optimizer step pre-hook), on the device.

    Two things are counted. Zero and non-finite `.grad` elements (float16 underflow, overflow).
    And whether a step's gradient is the step's own: from an optimizer's first step on, a hook
    on each of its parameters sees every backward's contribution before it is added to `.grad`,
    and `.grad` as it was then. At the first backward after a step `.grad` should be empty;
    what it holds is *stale*, left from earlier steps (a missing zero_grad: it grows with every
    step). At the step, `.grad` should hold what the backwards since the last step added; if it
    is empty, that is *lost* (zero_grad between backward and step). The error of a step is
    sqrt(stale + lost) / own over the squared norms of all the optimizer's parameters: 0 when
    every step uses exactly its own gradients. Scaling `.grad` in place between backward and
    step (clipping, GradScaler's unscale_) changes neither part, and gradient accumulation over
    several backwards per step is not stale. No value leaves the device before the script ends.
    """

    def __init__(self, torch):
        self.torch = torch
        self.steps = 0
        self.elements = 0
        self.zero = None
        self.nonfinite = None
        self.params = {}  # id(parameter) -> _Param, from its optimizer's first step on
        self.error_sum = None  # device scalars: sum of step errors, steps checked, first steps
        self.checked = None
        self.series = None
        import torch.optim.optimizer as optimizer

        self.handle = optimizer.register_optimizer_step_pre_hook(self._hook)

    def _add(self, grad):
        torch = self.torch
        zero = (grad == 0).sum()
        bad = (~torch.isfinite(grad)).sum()
        self.zero = zero if self.zero is None else self.zero + zero.to(self.zero.device)
        self.nonfinite = bad if self.nonfinite is None else self.nonfinite + bad.to(self.nonfinite.device)
        self.elements += grad.numel()
        return zero

    def _watch(self, param):
        state = _Param(param)
        torch = self.torch

        def contribution(grad):  # runs in backward, before `grad` is added to param.grad
            if state.fresh and not grad.is_sparse:
                state.fresh = False
                with torch.no_grad():
                    old = param.grad
                    state.own = _norm2(torch, grad.detach())
                    state.stale = None if old is None or old.is_sparse else _norm2(torch, old.detach())

        param.register_hook(contribution)
        self.params[id(param)] = state

    def _record(self, own, stale, lost):
        torch = self.torch
        wrong = torch.zeros((), device=own.device)
        wrong = _plus(_plus(wrong, stale), lost)
        error = (wrong / own).sqrt()
        valid = (own > 0) & torch.isfinite(error)
        error = torch.where(valid, error, torch.zeros_like(error))
        if self.error_sum is None:
            self.error_sum = torch.zeros((), device=own.device)
            self.checked = torch.zeros((), device=own.device)
            self.series = torch.full((SERIES,), float("nan"), device=own.device)
        self.error_sum += error.to(self.error_sum.device)
        self.checked += valid.to(self.checked.device)
        if self.steps <= SERIES:
            self.series[self.steps - 1] = torch.where(valid, error, torch.full_like(error, float("nan")))

    def _hook(self, opt, args, kwargs):
        self.steps += 1
        own = stale = lost = None
        with self.torch.no_grad():
            for group in opt.param_groups:
                for param in group["params"]:
                    grad = param.grad
                    zero = None
                    if grad is not None and not grad.is_sparse:
                        zero = self._add(grad.detach())
                    state = self.params.get(id(param))
                    if state is None:
                        if param.requires_grad:
                            self._watch(param)
                        continue
                    if state.fresh:  # no backward reached it since the last step
                        continue
                    state.fresh = True
                    own, stale = _plus(own, state.own), _plus(stale, state.stale)
                    if grad is None:
                        lost = _plus(lost, state.own)
                    elif zero is not None:
                        lost = _plus(lost, state.own * (zero == grad.numel()))
            if own is not None:
                self._record(own, stale, lost)

    def at_exit(self):
        """Steps seen: their totals. No step: the .grad of every live module's parameters."""
        self.handle.remove()
        where = "optimizer steps"
        if self.steps == 0:
            where = "exit"
            with self.torch.no_grad():
                for obj in gc.get_objects():
                    if isinstance(obj, self.torch.nn.Module):
                        for param in obj.parameters(recurse=False):
                            if param.grad is not None and not param.grad.is_sparse:
                                self._add(param.grad.detach())
        found = {"where": where, "steps": self.steps, "elements": self.elements, "zero": 0, "nonfinite": 0,
                 "checked_steps": 0, "error": None, "error_by_step": []}
        if self.elements:
            found.update(zero=int(self.zero.item()), nonfinite=int(self.nonfinite.item()))
        if self.checked is not None and self.checked.item() > 0:
            found.update(checked_steps=int(self.checked.item()), error=self.error_sum.item() / self.checked.item(),
                         error_by_step=[None if value != value else value
                                        for value in self.series[:min(self.steps, SERIES)].tolist()])
        return found


def _read_history(torch, script, wall_start):
    """Memory over time, and the script's lines holding the most at the peak."""
    history = _sibling("history")
    traces = torch.cuda.memory._snapshot().get("device_traces") or [[]]
    device = torch.cuda.current_device()
    trace = traces[device] if len(traces) > device else []
    allocated = torch.cuda.memory_allocated()
    peak = history.peak(trace, script, allocated)
    if peak is not None:
        peak["history_full"] = len(trace) >= HISTORY_ENTRIES  # the oldest events were dropped
    return {"timeline": history.timeline(trace, allocated, wall_start), "peak_at": peak}


def _device_peaks(torch):
    """Every visible GPU's peaks in this process: [[index, max allocated, max reserved], ...].
    Reading a device's statistics does not start a context on it."""
    return [[index, torch.cuda.max_memory_allocated(index), torch.cuda.max_memory_reserved(index)]
            for index in range(torch.cuda.device_count())]


def _is_oom(error):
    name = type(error).__name__
    return (isinstance(error, MemoryError) or name == "OutOfMemoryError"
            or (isinstance(error, RuntimeError) and "out of memory" in str(error).lower())
            or (isinstance(error, RuntimeError) and "can't allocate memory" in str(error).lower()))


def _run_as_main(source, path, argv, loops=(), sync=None):
    """Run `source` the way `python path argv...` would; (status, exit code, error text, the
    iterations of `loops` as memlint/verify/loopclock.py times them)."""
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    sys.argv = [path, *argv]
    lines = source.splitlines(keepends=True)
    linecache.cache[path] = (len(source), None, lines, path)  # tracebacks show the variant's lines
    timed = []
    try:
        code = compile(source, path, "exec")
        clock = _sibling("loopclock").LoopClock(code, loops, sync or (lambda: None)) if loops else None
        if clock is not None:
            clock.start()
        try:
            exec(code, module.__dict__)
        finally:
            if clock is not None:
                timed = clock.stop()
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            if not done.code:
                return "ok", 0, "", timed
            return "crash", done.code, f"the script called sys.exit({done.code})", timed
        print(done.code, file=sys.stderr)
        return "crash", 1, f"the script called sys.exit({str(done.code)!r})", timed
    except BaseException as error:  # noqa: B902 - the script's failure is what we measure
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        return ("oom" if _is_oom(error) else "crash"), 1, f"{type(error).__name__}: {error}", timed
    return "ok", 0, "", timed


def main(spec_path):
    tree = _sibling("tree")
    tree.become_subreaper()  # what the script starts stays below this process, setsid or not
    real_exit = os._exit

    def exit_now(code):  # os._exit skips `finally`: still leave nothing running
        tree.kill_descendants(os.getpid())
        real_exit(code)

    os._exit = exit_now
    try:
        return _measure(spec_path)
    finally:
        tree.kill_descendants(os.getpid())


def _measure(spec_path):
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    path = spec["path"]
    sys.path[0] = os.path.dirname(os.path.abspath(path))  # as `python path` would have it
    result_path = spec["result_file"]
    if spec.get("launcher"):  # one of several processes a launcher started: one result file each
        result_path += "." + os.environ.get("RANK", "0")
    result = {"status": "started", "rss_start": _rss_now()}
    _write(result_path, result)

    torch = None
    clock = time.perf_counter()
    if spec.get("torch"):
        try:
            import torch
        except ImportError as error:
            result.update(status="error", error=f"torch cannot be imported: {error}")
            _write(result_path, result)
            return 3
    result["overhead"] = {"import_torch": time.perf_counter() - clock}
    cuda = spec["device"] == "cuda"
    if cuda and (torch is None or not torch.cuda.is_available()):
        result.update(status="error", error="no CUDA device is available to torch")
        _write(result_path, result)
        return 3
    _seed(spec.get("seed", 0), torch)
    grads = _Grads(torch) if spec.get("grads") and torch is not None else None
    if cuda:
        clock = time.perf_counter()
        local_rank = int(os.environ.get("LOCAL_RANK", "0")) if spec.get("launcher") else 0
        if 0 < local_rank < torch.cuda.device_count():  # a launcher's process: start CUDA on its own GPU only
            torch.cuda.set_device(local_rank)
        torch.cuda.init()
        torch.cuda.synchronize()
        result["overhead"]["cuda_init"] = time.perf_counter() - clock
        torch.cuda.reset_peak_memory_stats()
        result["device_name"] = torch.cuda.get_device_name()
        if spec.get("timeline"):  # with each allocation's Python stack, to say where the peak is
            torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                     max_entries=HISTORY_ENTRIES)
    if torch is not None:
        result["torch"] = torch.__version__
    source_file = spec["source_file"]
    with open(source_file, encoding="utf-8") as handle:
        source = handle.read()
    result.update(rss_peak_reset=_reset_rss_peak(), rss_start=_rss_now(), wall_start=time.time())
    _write(result_path, result)

    start = time.perf_counter()
    sync = torch.cuda.synchronize if cuda else None  # an iteration's kernels count in its time
    status, exit_code, error, loops = _run_as_main(source, path, spec.get("argv", []), spec.get("loops") or (), sync)
    if cuda:
        try:
            torch.cuda.synchronize()
        except Exception:  # a device error is already the script's failure
            pass
    result.update(status=status, exit_code=exit_code, seconds=time.perf_counter() - start,
                  error=error, rss_peak=_rss_peak(), loops=loops)
    if cuda:
        try:
            result.update(device_peak=torch.cuda.max_memory_allocated(),
                          device_reserved=torch.cuda.max_memory_reserved(), devices=_device_peaks(torch))
            if spec.get("timeline"):  # read before recording stops: stopping clears the history
                result.update(_read_history(torch, os.path.abspath(path), result["wall_start"]))
                torch.cuda.memory._record_memory_history(enabled=None)
        except Exception as failure:  # keep what was measured
            result["note"] = f"device statistics failed: {failure}"
    if grads is not None:
        try:
            result["grads"] = grads.at_exit()
        except Exception as failure:
            result["note"] = f"gradient statistics failed: {failure}"
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    result["wall_end"] = time.time()  # the parent counts what exiting takes from here
    _write(result_path, result)
    return exit_code


def probe():
    """Print what this interpreter offers the verifier: torch's version, CUDA and its device."""
    found = {"python": sys.version.split()[0], "torch": None, "cuda": False, "device_name": ""}
    try:
        import importlib.util

        import torch

        found["torch"] = torch.__version__
        found["cuda"] = bool(torch.cuda.is_available())
        if found["cuda"]:
            found["device_name"] = torch.cuda.get_device_name()
            found["device_count"] = torch.cuda.device_count()
            try:
                found["memory_free"] = torch.cuda.mem_get_info()[0]
            except Exception:  # only the number of runs at once depends on it
                pass
        try:
            found["torchrun"] = importlib.util.find_spec("torch.distributed.run") is not None
        except ImportError:  # a torch without torch.distributed
            found["torchrun"] = False
    except ImportError as error:
        found["error"] = str(error)
    print(json.dumps(found))
    return 0


# What every run imports; and torch._dynamo, which the first optimizer imports (seconds, in every
# run), unless importing it starts CUDA (with a CUDA build it can reach triton, which may start
# the driver): then the server says so and is started again without it.
PRELOAD = ("torch", "torch.optim")
PRELOAD_TOO = ("torch._dynamo",)
CUDA_ERROR_NOT_INITIALIZED = 3


def _driver_path():
    """The CUDA driver library mapped into this process, or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if "libcuda.so" in line:
                    return line.split(None, 5)[-1].strip()
    except OSError:
        pass
    return None


def _cuda_started():
    """Whether this process started the CUDA driver (cuInit), after which a forked child cannot
    use CUDA. A CUDA build of torch may load the driver's library while being imported without
    starting it: the driver itself says which (cuDeviceGetCount answers "not initialised")."""
    path = _driver_path()
    if path is None:
        return False
    try:
        import ctypes

        driver = ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
        count = ctypes.c_int(0)
        return driver.cuDeviceGetCount(ctypes.byref(count)) != CUDA_ERROR_NOT_INITIALIZED
    except (OSError, AttributeError):
        return True  # cannot tell: as if started


def _cuda_started_by(what):
    """Why a child forked from here now could not be a fresh run ("" when it could). Threads
    are no reason: a torch process forks with its pools' threads all the time (DataLoader
    workers), and numpy's BLAS stops its own before a fork; a started CUDA driver is."""
    torch = sys.modules.get("torch")
    if (torch is not None and torch.cuda.is_initialized()) or _cuda_started():
        return f"importing {what} started CUDA"
    return ""


def serve(preload_too=True):
    """A fork server: import torch once, then fork one child per request, each a fresh run.

    Started by memlint.verify.forkserver. Reads one JSON request a line on stdin ({"id", "spec",
    "stdout", "stderr"}) and answers on stdout: {"ready": true, "preloaded": [...]} once,
    {"started": id, "pid"} per request, and {"exited": pid, "code"} when a child ends (code as
    Popen.returncode gives it). CUDA is never started here, so that each child can start its
    own context; forking is refused ({"ready": false, "why"}) if an import started it, and
    {"again_without": true} says that importing PRELOAD_TOO did (`preload_too=False` then).
    """
    import atexit
    import select
    import signal

    replies = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # whatever an import prints goes nowhere

    def reply(message):
        replies.write(json.dumps(message) + "\n")

    import importlib

    preloaded, again = [], False
    try:
        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except ImportError:
                if name == "torch":
                    raise
        why = _cuda_started_by("torch")
        for name in PRELOAD_TOO if preload_too and not why else ():
            try:
                importlib.import_module(name)
            except ImportError:
                continue
            preloaded.append(name)
            why = _cuda_started_by(name)
            again = bool(why)
    except Exception as error:  # noqa: B902 - the parent falls back to plain processes
        why = f"{type(error).__name__}: {error}"
    reply({"ready": not why, "why": why, "preloaded": preloaded, "again_without": again})
    if why:
        return 1
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_write)
    requests = sys.stdin.buffer
    pending = b""
    while True:
        ready, _, _ = select.select([requests.fileno(), wake_read], [], [])
        if wake_read in ready:
            os.read(wake_read, 4096)
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                reply({"exited": pid, "code": code})
        if requests.fileno() not in ready:
            continue
        chunk = os.read(requests.fileno(), 65536)
        if not chunk:  # the parent went away
            return 0
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid:
                reply({"started": request["id"], "pid": pid})
                continue
            code = 1
            try:  # the child: its own session, its own files, then a run as from a fresh process
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (wake_read, wake_write, requests.fileno(), replies.fileno()):
                    os.close(fd)
                os.setsid()
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                os.dup2(os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
                os.dup2(os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
                sys.stdin = open(os.devnull, encoding="utf-8")
                code = main(request["spec"])
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
                atexit._run_exitfuncs()  # the script's and torch's, as at a normal exit
            except BaseException:  # noqa: B902 - a harness failure: say it, never return to the loop
                traceback.print_exc()
            finally:
                os._exit(code if isinstance(code, int) else 1)


if __name__ == "__main__":
    if sys.argv[1:] == ["--probe"]:
        sys.exit(probe())
    if sys.argv[1:2] == ["--serve"]:
        sys.exit(serve(preload_too=sys.argv[2:] != ["--plain"]))
    sys.exit(main(sys.argv[1]))
