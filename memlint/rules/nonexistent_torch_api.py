"""MEM503 nonexistent-torch-api."""

from __future__ import annotations

import ast
from typing import Optional, Tuple

import libcst as cst

from memlint.analysis.torchapi import REMOVED, checked_first, names_absent_api, torch_api
from memlint.torch_target import TorchVersion
from memlint.analysis.tree import dotted_name, expression_nodes, last_part
from memlint.findings import Fix, Replace, Safety
from memlint.rule import Claim, Invalid, Rule

# Names no torch release has had, seen in articles about GPU memory -> the real API (a name in
# the same module, or `module.name` from the top of torch).
NEVER_TORCH = {
    "torch.cuda.memory_cache": "torch.cuda.memory_reserved",
    "torch.cuda.set_allocator": "torch.cuda.memory.change_current_allocator",
}
# How a function torch removed differs from the one that replaced it (memlint.analysis.torchapi.REMOVED)
_REMOVED_DIFFERS = {
    "torch.symeig": "; pass `UPLO=\"U\"` (symeig read the upper triangle), and use `torch.linalg.eigvalsh` "
                    "where `eigenvectors=False`",
    "torch.eig": "; its results are complex",
    "torch.lstsq": "; it takes `(A, B)` where `torch.lstsq` took `(B, A)`",
    "torch.solve": "; it takes `(A, B)` where `torch.solve` took `(B, A)`, and returns the solution alone",
}
_LINALG = TorchVersion(1, 8)  # the release that added `torch.linalg`
# `torch.<factory>_(buf, ...)`: in-place factories do not exist; the tensor refills itself.
REFILL = {
    "randn": ("normal_", ()), "rand": ("uniform_", ()), "randint": ("random_", None), "zeros": ("zero_", ()),
    "ones": ("fill_", ("1",)), "full": ("fill_", None),
}


def _refill(node: cst.Attribute, call: Optional[cst.Call], factory: str) -> Tuple[str, Optional[cst.CSTNode]]:
    """(what to write instead, the call rewritten) for `torch.randn_(buf)`: `buf.normal_()`."""
    method, fixed_args = REFILL[factory]
    shown = f"`tensor.{method}({', '.join(fixed_args or ())})`"
    if call is None or not call.args or call.args[0].keyword is not None or call.args[0].star:
        return shown, None
    rest = list(call.args[1:])
    if any(arg.keyword is not None or arg.star for arg in rest) or (fixed_args is not None and rest):
        return shown, None
    target = call.args[0].value
    if not type(target) in (cst.Name, cst.Attribute, cst.Subscript, cst.Call):
        return shown, None
    args = [cst.Arg(cst.parse_expression(a)) for a in fixed_args] if fixed_args is not None else rest
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return shown, cst.Call(cst.Attribute(target, cst.Name(method)), args)


class NonexistentTorchApi(Rule):
    """
    ## What it does
    Finds torch APIs that do not exist, where memlint knows what was meant, and calls of the
    functions torch 2.0 removed, which it keeps as stubs that raise RuntimeError (`torch.symeig`,
    `torch.eig`, `torch.lstsq`, `torch.solve`, `torch.matrix_rank`: their `torch.linalg`
    replacements came in torch 1.8; a project that supports an older torch is left alone, and
    so is a call in code that runs only where the replacement is missing: an `except` handler,
    a branch of a test of the version or of `torch.linalg`). Also:
    `torch.cuda.memory_cache` (the API is `torch.cuda.memory_reserved`),
    `torch.cuda.set_allocator` (`torch.cuda.memory.change_current_allocator`), in-place
    factories such as `torch.randn_(buf)` (`buf.normal_()`; also `rand_`, `randint_`, `zeros_`,
    `ones_`, `full_`), a device module's function written with an underscore for its dot
    (`torch.xpu_empty_cache()`: `torch.xpu.empty_cache()`), and names that differ from a real
    one only in case (`torch.nn.Batchnorm2d`).

    The public API comes from data shipped with memlint (memlint/data/torch_api.json, recorded
    from one torch release by scripts/torch_api.py); the linter does not import torch. A name is
    judged only under a module whose namespace the data holds whole (`torch`, `torch.cuda`,
    `torch.nn`, ...; never `torch.ops`, `torch._C` or a private name), and not where the code
    checks for it first (`hasattr`, `getattr`, a version test, `try: ... except
    AttributeError`). Other names the data lacks are left alone: they may come from another
    torch release (`torch.set_deterministic` was removed, newer releases add names) or from a
    plugin that adds a device module at run time (`torch.npu`).

    ## Why is this bad?
    The line fails with `AttributeError` when it runs, often on a path (a memory report, an OOM
    handler) that is rarely run. These names come from articles and generated code about GPU
    memory; what they were meant to do is what the real API does. A removed function fails
    with RuntimeError, on any torch from 2.0 on (ACKTR's K-FAC step calls `torch.symeig` on its
    first update).

    ## Example
    ```python
    torch.randn_(noise)
    print(torch.cuda.memory_cache())
    ```

    Use instead:
    ```python
    noise.normal_()
    print(torch.cuda.memory_reserved())
    ```

    ## Fix
    Writes the real API: a call of the in-place refill on the tensor, the renamed function in
    the same module, or the name in its right case.

    ## Fix safety
    Unsafe: the code did not run before; the real API may take other arguments than those the
    made-up one was given (`change_current_allocator` takes a `CUDAPluggableAllocator`).
    """

    CODE = "MEM503"
    IN_TESTS = True  # the call raises, in a test as anywhere
    NAME = "nonexistent-torch-api"
    MESSAGE = "this torch API does not exist"
    FIX_SAFETY = Safety.UNSAFE
    CLAIM = Claim.NONE

    VALID = (
        "import torch\nprint(torch.cuda.memory_reserved(), torch.cuda.max_memory_allocated())\nbuf.normal_()\n",
        # real names with an underscore; a device module's function the data lacks under it
        "import torch\ntorch.xpu.empty_cache()\ntorch.set_grad_enabled(False)\nx = torch.cudnn_convolution\n"
        "torch.xpu_made_up_name()\n",
        "import torch\ntorch.nn.init.normal_(w)\ntorch.relu_(x)\ntorch.nn.init.zeros_(b)\n",
        # names the data lacks but other releases or plugins have
        "import torch\ntorch.set_deterministic(True)\nx = torch.npu.device_count()\n",
        # checked first
        "import torch\nif hasattr(torch.cuda, \"memory_cache\"):\n    print(torch.cuda.memory_cache())\n",
        "import torch\ntry:\n    torch.cuda.set_allocator(alloc)\nexcept AttributeError:\n    pass\n",
        # not torch's, private, or dynamic
        "import mylib as torch\ntorch.randn_(x)\n",
        "import torch\nx = torch._C._cuda_getDeviceCount()\ny = torch.ops.mylib.custom_op(x)\n",
        "import torch.utils.tensorboard\n",
        # their replacements; the name checked first; a method of another library
        "import torch\nd, Q = torch.linalg.eigh(m_aa, UPLO=\"U\")\nx = torch.linalg.solve(A, b)\n",
        "import torch\nif not hasattr(torch, \"linalg\"):\n    d, Q = torch.symeig(m, eigenvectors=True)\n",
        "import torch\nfrom packaging import version\n_HAS_LINALG = version.parse(torch.__version__) >= version.parse(\"1.8\")\n"
        "def eig(m):\n    if _HAS_LINALG:\n        return torch.linalg.eigh(m, UPLO=\"U\")\n"
        "    else:\n        return torch.symeig(m, eigenvectors=True)\n",
        "import torch\ndef eig(m):\n    try:\n        return torch.linalg.eigh(m, UPLO=\"U\")\n"
        "    except AttributeError:\n        return torch.symeig(m, eigenvectors=True)\n",
        "import numpy as np\nimport scipy.linalg\nx = np.linalg.solve(A, b)\nw = scipy.linalg.eig(A)\n",
    )
    INVALID = (
        Invalid("import torch\nprint(torch.cuda.memory_cache())\n",
                "import torch\nprint(torch.cuda.memory_reserved())\n"),
        Invalid("import torch\ntorch.cuda.set_allocator(allocator)\n",
                "import torch\ntorch.cuda.memory.change_current_allocator(allocator)\n"),
        Invalid("import torch\nfor step in range(n):\n    torch.randn_(buf)\n",
                "import torch\nfor step in range(n):\n    buf.normal_()\n"),
        Invalid("import torch as t\nt.full_(self.mask, 0.5)\nt.ones_(w)\n",
                "import torch as t\nself.mask.fill_(0.5)\nw.fill_(1)\n"),
        Invalid("import torch.nn as nn\nnorm = nn.Batchnorm2d(64)\n", "import torch.nn as nn\nnorm = nn.BatchNorm2d(64)\n"),
        # llama-recipes' `clear_gpu_cache`: an AttributeError on every XPU run
        Invalid("import torch\nif is_xpu_available():\n    torch.xpu_empty_cache()\nelse:\n    torch.cuda.empty_cache()\n",
                "import torch\nif is_xpu_available():\n    torch.xpu.empty_cache()\nelse:\n    torch.cuda.empty_cache()\n"),
        Invalid("import torch as t\nt.cuda_synchronize()\n", "import torch as t\nt.cuda.synchronize()\n"),
        Invalid("from torch.cuda import memory_cache\n"),
        # removed in torch 2.0 (ACKTR's K-FAC step): the stub raises; no fix (the arguments differ)
        Invalid("import torch\nd, Q = torch.symeig(m_aa, eigenvectors=True)\n"),
        Invalid("import torch as t\nx = t.solve(b, A)[0]\nr = t.matrix_rank(A)\n"),
        # a test of the removed name holds on torch 2, which keeps the stub: the call raises
        Invalid("import torch\nif hasattr(torch, \"symeig\"):\n    d, Q = torch.symeig(m, eigenvectors=True)\n"),
    )

    @classmethod
    def may_report(cls, module: ast.Module) -> bool:
        return names_absent_api(module)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        parent = self.facts.tree.parent(node)
        if type(parent) is cst.Attribute and parent.value is node:
            return  # the longest chain is judged
        qualified = self.facts.names.qualified_name(node)
        if qualified is None or not qualified.startswith("torch."):
            return
        missing = torch_api().missing_last(qualified)
        if missing is None or missing[1].startswith("_"):
            return
        call = parent if type(parent) is cst.Call and parent.func is node else None
        if qualified in REMOVED:  # (`checked_first` is no guard: torch 2 keeps the stub that raises)
            if call is not None and (self.target_torch is None or self.target_torch >= _LINALG) and \
                    not self._fallback(call):
                self.report(call, f"`{qualified}` was removed in torch 2.0: from 2.0 on, calling it raises "
                                  f"RuntimeError; use `{REMOVED[qualified]}`{_REMOVED_DIFFERS.get(qualified, '')}")
            return
        if type(parent) in (cst.AssignTarget, cst.Del) or checked_first(self.facts.tree, node):
            return
        found = self._instead(node, call, *missing)
        if found is not None:
            what, fix = found
            self.report(call or node, f"`torch` has no `{qualified}`; use {what}", fix)

    def _fallback(self, call: cst.Call) -> bool:
        """The call of a removed function is the code's fallback for a torch without its
        replacement: in an `except` handler, or in a branch of a test of the version or of
        `torch.linalg` (`if _HAS_LINALG: ... else: torch.symeig(...)`, the flag bound to such a
        test). A test of the removed name itself (`hasattr(torch, "symeig")`) is no guard: torch
        2 keeps the stub, so the test holds and the call raises."""
        tree = self.facts.tree
        for ancestor in tree.ancestors(call):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                return False
            if type(ancestor) is cst.ExceptHandler:
                return True
            test = ancestor.test if type(ancestor) in (cst.If, cst.IfExp) else None
            if test is not None and not tree.contains(test, call) and self._tests_the_replacement(test):
                return True
        return False

    def _tests_the_replacement(self, test: cst.BaseExpression, depth: int = 0) -> bool:
        """A test of torch's version or of `torch.linalg`, here or in the one assignment of a
        flag it reads."""
        for node in expression_nodes(test):
            name = last_part(dotted_name(node)) if type(node) in (cst.Name, cst.Attribute) else None
            if name is not None and ("version" in name.lower() or name == "linalg"):
                return True
            if type(node) is cst.SimpleString and node.evaluated_value in ("linalg", "__version__"):
                return True
            if type(node) is cst.Name and depth == 0:
                binds = self.facts.scopes.in_effect(node.value, test)
                if len(binds) == 1 and binds[0].value is not None and \
                        self._tests_the_replacement(binds[0].value, depth + 1):
                    return True
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or type(node.names) is cst.ImportStar:
            return
        module = self.facts.names.qualified_name(node.module) or dotted_name(node.module)
        for alias in node.names:
            qualified = f"{module}.{dotted_name(alias.name)}"
            missing = torch_api().missing_last(qualified)
            if qualified in REMOVED:
                continue  # the import binds the stub; its call raises, where memlint cannot see it is torch's
            if missing is not None and self._instead(None, None, *missing) is not None and not checked_first(self.facts.tree, node):
                self.report(alias, f"`{module}` has no `{missing[1]}`: this import fails")

    def _instead(self, node: Optional[cst.Attribute], call: Optional[cst.Call], module: str, name: str
                 ) -> Optional[Tuple[str, Optional[Fix]]]:
        """(what to use instead, the fix) for a name `module` lacks; None when memlint cannot tell."""
        api = torch_api()
        qualified = f"{module}.{name}"
        if qualified in NEVER_TORCH and api.has(NEVER_TORCH[qualified]):
            real = NEVER_TORCH[qualified]
            if node is None:
                return f"`{real}`", None
            path = real[len(module) + 1:].split(".") if real.startswith(module + ".") else None
            replacement: cst.BaseExpression = node.value
            for part in path or ():
                replacement = cst.Attribute(replacement, cst.Name(part))
            fix = Fix((Replace(node, replacement),), Safety.UNSAFE, f"use `{real}`") if path else None
            return f"`{real}{'()' if call is not None else ''}`", fix
        factory = name[:-1]
        if module == "torch" and name.endswith("_") and factory in REFILL and api.has(f"torch.{factory}"):
            method = REFILL[factory][0]
            if not api.has(f"torch.Tensor.{method}"):
                return None
            shown, rewritten = _refill(node, call, factory) if node is not None else (f"`tensor.{method}()`", None)
            fix = Fix((Replace(call, rewritten),), Safety.UNSAFE, f"refill the tensor in place: `.{method}()`") \
                if call is not None and rewritten is not None else None
            return f"the tensor's own in-place refill, {shown}", fix
        device, _, function = name.partition("_")
        if module == "torch" and function and api.known_module(f"torch.{device}") and api.has(f"torch.{device}.{function}"):
            real = f"torch.{device}.{function}"  # `torch.xpu_empty_cache`: an underscore for the dot
            fix = Fix((Replace(node, cst.Attribute(cst.Attribute(node.value, cst.Name(device)), cst.Name(function))),),
                      Safety.UNSAFE, f"use `{real}`") if node is not None else None
            return f"`{real}{'()' if call is not None else ''}`", fix
        same = [real for real in api.names_of(module) if real.lower() == name.lower()]
        if len(same) == 1:
            fix = Fix((Replace(node, node.with_changes(attr=cst.Name(same[0]))),), Safety.UNSAFE,
                      f"write `{same[0]}`") if node is not None else None
            return f"`{module}.{same[0]}` (names are case-sensitive)", fix
        return None
