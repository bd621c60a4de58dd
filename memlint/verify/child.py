"""The child side of a verifier run: run one script as `__main__` and measure it.

Started by memlint.verify.measure as `python child.py SPEC.json`, by path, so that it imports
nothing of memlint (and not libcst): only the standard library and, lazily, torch. The spec
names the source to run, the path it runs as, its argv, the device, the seed and where to write
the result. The result is JSON, written once before the script starts (so a crash still leaves
the starting RSS) and again when it ends.
"""

import gc
import json
import linecache
import os
import sys
import time
import traceback
import types

TIMELINE_POINTS = 4000  # at most this many (seconds, bytes) points in a timeline


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


class _Grads:
    """Counts zero and non-finite gradient elements at every optimizer step (on the device)."""

    def __init__(self, torch):
        self.torch = torch
        self.steps = 0
        self.elements = 0
        self.zero = None
        self.nonfinite = None
        import torch.optim.optimizer as optimizer

        self.handle = optimizer.register_optimizer_step_pre_hook(self._hook)

    def _add(self, grad):
        torch = self.torch
        zero = (grad == 0).sum()
        bad = (~torch.isfinite(grad)).sum()
        self.zero = zero if self.zero is None else self.zero + zero.to(self.zero.device)
        self.nonfinite = bad if self.nonfinite is None else self.nonfinite + bad.to(self.nonfinite.device)
        self.elements += grad.numel()

    def _hook(self, opt, args, kwargs):
        self.steps += 1
        with self.torch.no_grad():
            for group in opt.param_groups:
                for param in group["params"]:
                    if param.grad is not None and not param.grad.is_sparse:
                        self._add(param.grad.detach())

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
        if not self.elements:
            return {"where": where, "steps": self.steps, "elements": 0, "zero": 0, "nonfinite": 0}
        return {"where": where, "steps": self.steps, "elements": self.elements,
                "zero": int(self.zero.item()), "nonfinite": int(self.nonfinite.item())}


def _cuda_timeline(torch, baseline_time):
    """Allocated bytes over time from the allocator's history, anchored at the current value."""
    snapshot = torch.cuda.memory._snapshot()
    traces = snapshot.get("device_traces") or [[]]
    trace = traces[torch.cuda.current_device()] if len(traces) > torch.cuda.current_device() else []
    points, level, origin = [], 0, None
    for index, entry in enumerate(trace):
        action = entry.get("action")
        if action == "alloc":
            level += entry.get("size", 0)
        elif action == "free_completed":
            level -= entry.get("size", 0)
        else:
            continue
        stamp = entry.get("time_us")
        if stamp is None:
            points.append([float(index), level])
            continue
        if origin is None:  # epoch microseconds, as recent torch gives; else count from the first
            origin = baseline_time if abs(stamp / 1e6 - baseline_time) < 1e5 else stamp / 1e6
        points.append([stamp / 1e6 - origin, level])
    offset = torch.cuda.memory_allocated() - level  # the history may have lost its oldest entries
    return [[t, b + offset] for t, b in _thin(points)]


def _thin(points):
    """At most TIMELINE_POINTS points, keeping the highest of each stretch."""
    if len(points) <= TIMELINE_POINTS:
        return points
    step = len(points) / TIMELINE_POINTS
    out = []
    for i in range(TIMELINE_POINTS):
        chunk = points[int(i * step):int((i + 1) * step)] or points[-1:]
        out.append(max(chunk, key=lambda p: p[1]))
    return out


def _is_oom(error):
    name = type(error).__name__
    return (isinstance(error, MemoryError) or name == "OutOfMemoryError"
            or (isinstance(error, RuntimeError) and "out of memory" in str(error).lower())
            or (isinstance(error, RuntimeError) and "can't allocate memory" in str(error).lower()))


def _run_as_main(source, path, argv):
    """Run `source` the way `python path argv...` would; (status, exit code, error text)."""
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    sys.argv = [path, *argv]
    lines = source.splitlines(keepends=True)
    linecache.cache[path] = (len(source), None, lines, path)  # tracebacks show the variant's lines
    try:
        code = compile(source, path, "exec")
        exec(code, module.__dict__)
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            status = "ok" if not done.code else "crash"
            return status, done.code or 0, ""
        print(done.code, file=sys.stderr)
        return "crash", 1, str(done.code)
    except BaseException as error:  # noqa: B902 - the script's failure is what we measure
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        return ("oom" if _is_oom(error) else "crash"), 1, f"{type(error).__name__}: {error}"
    return "ok", 0, ""


def main(spec_path):
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    path = spec["path"]
    sys.path[0] = os.path.dirname(os.path.abspath(path))  # as `python path` would have it
    result_path = spec["result_file"]
    result = {"status": "started", "rss_start": _rss_now()}
    _write(result_path, result)

    torch = None
    if spec.get("torch"):
        try:
            import torch
        except ImportError as error:
            result.update(status="error", error=f"torch cannot be imported: {error}")
            _write(result_path, result)
            return 3
    cuda = spec["device"] == "cuda"
    if cuda and (torch is None or not torch.cuda.is_available()):
        result.update(status="error", error="no CUDA device is available to torch")
        _write(result_path, result)
        return 3
    _seed(spec.get("seed", 0), torch)
    grads = _Grads(torch) if spec.get("grads") and torch is not None else None
    if cuda:
        torch.cuda.init()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        result["device_name"] = torch.cuda.get_device_name()
        if spec.get("timeline"):
            torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                     max_entries=1_000_000)
    if torch is not None:
        result["torch"] = torch.__version__
    source_file = spec["source_file"]
    with open(source_file, encoding="utf-8") as handle:
        source = handle.read()
    result.update(rss_peak_reset=_reset_rss_peak(), rss_start=_rss_now(), wall_start=time.time())
    _write(result_path, result)

    start = time.perf_counter()
    status, exit_code, error = _run_as_main(source, path, spec.get("argv", []))
    if cuda:
        try:
            torch.cuda.synchronize()
        except Exception:  # a device error is already the script's failure
            pass
    result.update(status=status, exit_code=exit_code, seconds=time.perf_counter() - start,
                  error=error, rss_peak=_rss_peak())
    if cuda:
        try:
            result.update(device_peak=torch.cuda.max_memory_allocated(),
                          device_reserved=torch.cuda.max_memory_reserved())
            if spec.get("timeline"):
                result["timeline"] = _cuda_timeline(torch, result["wall_start"])
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
    _write(result_path, result)
    return exit_code


def probe():
    """Print what this interpreter offers the verifier: torch's version, CUDA and its device."""
    found = {"python": sys.version.split()[0], "torch": None, "cuda": False, "device_name": ""}
    try:
        import torch

        found["torch"] = torch.__version__
        found["cuda"] = bool(torch.cuda.is_available())
        if found["cuda"]:
            found["device_name"] = torch.cuda.get_device_name()
    except ImportError as error:
        found["error"] = str(error)
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(probe() if sys.argv[1:] == ["--probe"] else main(sys.argv[1]))
