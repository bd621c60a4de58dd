"""Calls that hand the caching allocator's blocks back to the driver: `torch.cuda.empty_cache()`
(and its XPU, MPS, NPU and MLU twins), the helpers that do nothing else, and the conditions
that only pick the device (under them, the call still runs every time).

Projects wrap the call to pick the device (`def empty_cache(): if is_torch_npu_available():
torch.npu.empty_cache() else: torch.cuda.empty_cache()`) and call the wrapper from their
training steps, often from another module. A per-step cost is then spelled `empty_cache()`
at the call: that call is what to remove, not the wrapper's body, which its other callers
(between phases, after an OOM) still need. The module summary says which functions are such
wrappers (memlint.analysis.summary), so a call of one from another module is known too.
"""

from __future__ import annotations

import re
from typing import Callable, Optional, Sequence

import libcst as cst

from memlint.analysis.tree import walk

EMPTY_CACHE = frozenset({"torch.cuda.empty_cache", "torch.xpu.empty_cache", "torch.mps.empty_cache",
                         "torch.npu.empty_cache", "torch.mlu.empty_cache"})
_DEVICE_WORDS = frozenset({"cuda", "gpu", "gpus", "xpu", "mps", "npu", "mlu", "device", "devices", "cpu",
                           "accelerator"})
_MEMORY_WORDS = frozenset({"memory", "mem", "reserved", "allocated", "free", "oom", "low", "enough", "usage",
                           "utilization", "pressure"})
_WORD = re.compile(r"[a-z]+")
_ABOUT_MEMORY = _MEMORY_WORDS | {"cache", "empty", "offload", "gc", "vram", "lowvram", "lowmem", "medvram"}


def speaks_of_memory(name: str) -> bool:
    """A name that speaks of memory or its cache, word by word (`args.empty_cache`,
    `low_mem`, `offload_optimizer`; not `freeze_backbone` nor `allow_tf32`)."""
    return bool(set(_WORD.findall(name.lower())) & _ABOUT_MEMORY)


def picks_device(test: cst.BaseExpression) -> bool:
    """Whether a condition only asks which device is there, so that what it guards still runs
    every time: its names and strings speak of a device (`torch.cuda.is_available()`,
    `is_torch_npu_available()`, `args.n_gpu > 0`, `device.type == "cuda"`, `"cuda" in
    str(device)`) and of nothing of memory. Not a test of memory (`torch.cuda.memory_reserved()
    > limit`, `is_gpu_memory_low()`) or of the data (`inputs.shape[1] > 4096`); every part of
    an `and` or `or` so (`step % 100 == 0 and torch.cuda.is_available()` is a periodic test)."""
    kind = type(test)
    if kind is cst.BooleanOperation:
        return picks_device(test.left) and picks_device(test.right)  # type: ignore[attr-defined]
    if kind is cst.UnaryOperation and type(test.operator) is cst.Not:  # type: ignore[attr-defined]
        return picks_device(test.expression)  # type: ignore[attr-defined]
    words = {word for node in walk(test) if type(node) in (cst.Name, cst.SimpleString)
             for word in _WORD.findall(node.value.lower())}  # type: ignore[attr-defined]
    return bool(words & _DEVICE_WORDS) and not words & _MEMORY_WORDS


def only_empties_cache(func: cst.FunctionDef, call_name: Callable[[cst.CSTNode], Optional[str]]) -> bool:
    """Whether `func` takes no parameters and its body only empties the allocator's cache
    (`call_name`: the qualified name a call means): calls of `EMPTY_CACHE` (at least one), under
    conditions that pick the device (`picks_device`), with a docstring, `pass` or a bare `return`. Anything else
    (a `gc.collect()`, a log, a synchronise, a counter) is a reason to keep the call."""
    params = func.params
    if params.params or params.posonly_params or params.kwonly_params or \
            type(params.star_arg) is cst.Param or params.star_kwarg is not None:
        return False
    return _empties(_lines(func.body), call_name) > 0


def _empties(statements, call_name: Callable[[cst.CSTNode], Optional[str]]) -> int:  # type: ignore[no-untyped-def]
    """How many cache-emptying calls the statements make, or 0 when they do anything else."""
    count = 0
    for statement in statements:
        if type(statement) is cst.If:
            if not picks_device(statement.test):
                return 0
            inner = _empties(_lines(statement.body), call_name)
            orelse = statement.orelse
            while type(orelse) is cst.If:  # elif
                found = _empties(_lines(orelse.body), call_name) if picks_device(orelse.test) else 0
                if not found:
                    return 0
                inner += found
                orelse = orelse.orelse
            if orelse is not None:
                found = _empties(_lines(orelse.body), call_name)  # type: ignore[union-attr]
                if not found:
                    return 0
                inner += found
            if not inner:
                return 0
            count += inner
            continue
        if type(statement) is not cst.SimpleStatementLine:
            return 0
        for small in statement.body:
            kind = type(small)
            if kind is cst.Pass or (kind is cst.Return and small.value is None):  # type: ignore[attr-defined]
                continue
            if kind is not cst.Expr:
                return 0
            value = small.value  # type: ignore[attr-defined]
            if type(value) in (cst.SimpleString, cst.ConcatenatedString):
                continue  # the docstring
            name = call_name(value) if type(value) is cst.Call and not value.args else None
            if name not in EMPTY_CACHE:
                return 0
            count += 1
    return count


def _lines(block: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    """The statements of a block, a one-line suite (`def free(): torch.cuda.empty_cache()`) as one line."""
    if type(block) is cst.SimpleStatementSuite:
        return [cst.SimpleStatementLine(body=block.body)]  # type: ignore[attr-defined]
    return block.body  # type: ignore[attr-defined,return-value]

