"""Calls that hand the caching allocator's blocks back to the driver: `torch.cuda.empty_cache()`
(and its XPU and MPS twins), and the helpers that do nothing else.

Projects wrap the call to pick the device (`def empty_cache(): if is_torch_npu_available():
torch.npu.empty_cache() else: torch.cuda.empty_cache()`) and call the wrapper from their
training steps, often from another module. A per-step cost is then spelled `empty_cache()`
at the call: that call is what to remove, not the wrapper's body, which its other callers
(between phases, after an OOM) still need. The module summary says which functions are such
wrappers (memlint.analysis.summary), so a call of one from another module is known too.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

import libcst as cst

EMPTY_CACHE = frozenset({"torch.cuda.empty_cache", "torch.xpu.empty_cache", "torch.mps.empty_cache",
                         "torch.npu.empty_cache", "torch.mlu.empty_cache"})
# A condition that only asks which device is there: what it guards still runs every time.
DEVICE_TEST = re.compile(r"cuda|device|gpu|is_available|xpu|mps|npu|mlu", re.IGNORECASE)


def only_empties_cache(func: cst.FunctionDef, call_name: Callable[[cst.CSTNode], Optional[str]]) -> bool:
    """Whether `func` takes no parameters and its body only empties the allocator's cache
    (`call_name`: the qualified name a call means): calls of `EMPTY_CACHE` (at least one), under
    conditions that pick the device (`DEVICE_TEST`), with a docstring, `pass` or a bare `return`. Anything else
    (a `gc.collect()`, a log, a synchronise, a counter) is a reason to keep the call."""
    params = func.params
    if params.params or params.posonly_params or params.kwonly_params or \
            isinstance(params.star_arg, cst.Param) or params.star_kwarg is not None:
        return False
    return _empties(func.body.body, call_name) > 0


def _empties(statements, call_name: Callable[[cst.CSTNode], Optional[str]]) -> int:  # type: ignore[no-untyped-def]
    """How many cache-emptying calls the statements make, or 0 when they do anything else."""
    count = 0
    for statement in statements:
        if type(statement) is cst.If:
            if not _picks_device(statement):
                return 0
            inner = _empties(statement.body.body, call_name)
            orelse = statement.orelse
            while type(orelse) is cst.If:  # elif
                found = _empties(orelse.body.body, call_name) if _picks_device(orelse) else 0
                if not found:
                    return 0
                inner += found
                orelse = orelse.orelse
            if orelse is not None:
                found = _empties(orelse.body.body, call_name)  # type: ignore[union-attr]
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


def _picks_device(branch: cst.If) -> bool:
    return bool(DEVICE_TEST.search(cst.Module([]).code_for_node(branch.test)))

