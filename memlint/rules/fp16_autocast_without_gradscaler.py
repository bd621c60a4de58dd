"""MEM401 fp16-autocast-without-gradscaler."""

from __future__ import annotations

from typing import List, Optional

import libcst as cst

from memlint.analysis import Facts
from memlint.analysis.regions import Autocast
from memlint.analysis.requirement import SINCE, exists_test
from memlint.analysis.roles import Backward
from memlint.analysis.tree import dotted_name
from memlint.findings import Edit, Fix, InsertAfter, InsertBefore, Replace, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import show
from memlint.torch_target import TorchVersion

_FP16 = frozenset({"torch.float16"})
_GRAD_SCALER_SINCE = SINCE["torch.amp.GradScaler"]
_CUDA_GRAD_SCALER_SINCE = TorchVersion(1, 6)  # torch.cuda.amp.GradScaler, the one before it


def _bare(expr: cst.BaseExpression) -> cst.BaseExpression:
    return expr.with_changes(lpar=[], rpar=[]) if getattr(expr, "lpar", None) else expr


class Fp16AutocastWithoutGradScaler(Rule):
    """
    ## What it does
    Finds a `backward()` of a loss computed under float16 autocast - `torch.autocast("cuda")`
    (float16 is CUDA's default), `torch.amp.autocast`, `torch.cuda.amp.autocast`,
    `dtype=torch.float16` - when the module never uses a `GradScaler` (one it makes and never
    reads, `self.scaler = GradScaler()` in `__init__`, does not count); also where the dtype is
    chosen at run time and one choice is float16 (`torch.bfloat16 if supported else
    torch.float16`, a table of dtypes indexed by a setting, `getattr(torch, name)`): on the GPUs
    or settings where the run picks float16, it runs with no scaler. The autocast may be bound
    to a name first and entered by it (`ctx = nullcontext() if cpu else torch.amp.autocast(...)`,
    then `with ctx:`), or entered through a `@contextmanager` function of the module or the
    project that wraps one (`with torch_autocast(enabled=fp16):`, its parameters bound to the
    call's arguments).

    ## Why is this bad?
    The backward of float16 operations runs in float16, whose smallest value is about 6e-8:
    smaller gradients become exactly zero and those weights stop learning. With a small loss
    (a loss weight, a distillation term) a measured run had 100% of a small layer's weight
    gradients exactly zero; with `GradScaler` they were not. `GradScaler` multiplies the loss
    before the backward, unscales the gradients before the step and skips steps that overflowed.

    ## Example
    ```python
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    ```

    Use instead:
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    ```

    ## When it is not reported
    bfloat16 autocast (also through a variable assigned once, and the CPU's default; float16
    picked only where the device is not CUDA: `torch.bfloat16 if device.type in ["cuda", "cpu"]
    else torch.float16`, the float16 for Apple's MPS), autocast
    used only for inference or under `no_grad`, `enabled=False`, a module that makes or uses a
    `GradScaler` anywhere, `accelerator.backward` / Lightning / DeepSpeed (they scale for you),
    an autocast whose device cannot be told (`device_type=` a parameter without a default), and
    a backward that does not train: no optimizer step can follow it (a unit test looking at
    gradients or documenting autocast) or it is meant to fail (`pytest.raises`). A plain backward
    that runs only where the flag choosing the autocast fails (`if use_amp:` an autocast forward,
    later `if use_amp:` a scaler object's call, `else: loss.backward()`). A benchmark
    module (`bench.py`, `benchmark_*.py`, a file right inside `benchmarks/`): it trains only to time
    the steps, and keeps no weights.

    ## Fix
    Creates `scaler = torch.amp.GradScaler("cuda")` before the training loop (another name
    if `scaler` is taken), turns `loss.backward()` into `scaler.scale(loss).backward()` and
    `optimizer.step()` into `scaler.step(optimizer)` followed by `scaler.update()`, and calls
    `scaler.unscale_(optimizer)` before `clip_grad_norm_` / `clip_grad_value_` so clipping still
    sees true gradients. Only for one backward and one plain `optimizer.step()` in the loop.
    Where the module made a scaler the loop can reach and never used it (`self.scaler` of the
    same class, a module-level name), the fix goes through that one instead of making another.

    ## Fix safety
    Safe: on a GPU the updates are those float16 training is meant to make (steps whose
    gradients overflowed are skipped); without CUDA the scaler disables itself and changes
    nothing. Unsafe when the loop is in a function that is itself called in a loop
    (`train_one_epoch`): each call starts a fresh scaler, whose first steps may be skipped while
    it finds its scale; pass one scaler in instead. No fix when gradients are read between the backward and the step (they would be
    scaled there) or the step or clipping happens in a helper. Where the project supports torch
    older than 2.3 (`target-torch`), which has no `torch.amp.GradScaler`, the fix picks the class
    each torch has: `torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler") else
    torch.cuda.amp.GradScaler()` (the same class on the versions before, from 1.6; the branch is
    the one MEM402 asks for, so the fixed code is not reported again).
    """

    CODE = "MEM401"
    NAME = "fp16-autocast-without-gradscaler"
    MESSAGE = "a loss computed under float16 autocast is backwarded without a GradScaler"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.GRADIENTS_FIXED

    VALID = (
        # a context manager whose dtype is an expression of its parameters: not known at the call
        "import contextlib\nimport torch\n\n\n@contextlib.contextmanager\n"
        "def autocast_ctx(enabled=True, fp16=False):\n"
        "    with torch.autocast(\"cuda\", dtype=torch.float16 if fp16 else torch.bfloat16, enabled=enabled):\n"
        "        yield\n\n\ndef train(model, loader, optimizer):\n    for x, y in loader:\n"
        "        with autocast_ctx():\n            loss = model(x.cuda()).sum()\n"
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
        # a context manager method called with bfloat16 (its `self` is no argument of the call)
        "import contextlib\nimport torch\n\n\nclass Trainer:\n    def __init__(self, model, optimizer):\n"
        "        self.model = model\n        self.optimizer = optimizer\n\n"
        "    @contextlib.contextmanager\n    def autocast(self, dtype=torch.float16):\n"
        "        with torch.autocast(\"cuda\", dtype=dtype):\n            yield\n\n"
        "    def train(self, loader):\n        for x, y in loader:\n"
        "            with self.autocast(torch.bfloat16):\n"
        "                loss = self.model(x.cuda()).sum()\n            self.optimizer.zero_grad()\n"
        "            loss.backward()\n            self.optimizer.step()\n",
        # bfloat16, also through a variable assigned once
        "import torch\nfor x in loader:\n    with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n"
        "        loss = model(x).sum()\n    loss.backward()\n    opt.step()\n",
        "import torch\namp_dtype = torch.bfloat16\nfor x in loader:\n"
        "    with torch.autocast(device_type=\"cuda\", dtype=amp_dtype):\n        loss = model(x).sum()\n"
        "    loss.backward()\n    opt.step()\n",
        # the CPU's default is bfloat16
        "import torch\nfor x in loader:\n    with torch.autocast(\"cpu\"):\n        loss = model(x).sum()\n"
        "    loss.backward()\n    opt.step()\n",
        # a scaler is used
        "import torch\nscaler = torch.amp.GradScaler(\"cuda\")\nfor x in loader:\n    with torch.autocast(\"cuda\"):\n"
        "        loss = model(x).sum()\n    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n",
        # ... or handed to a helper, which may scale with it
        "import torch\nfrom .amp import scaled_backward\nscaler = torch.amp.GradScaler(\"cuda\")\nfor x in loader:\n"
        "    with torch.autocast(\"cuda\"):\n        loss = model(x).sum()\n    if fused:\n"
        "        scaled_backward(loss, scaler, opt)\n    else:\n        loss.backward()\n        opt.step()\n",
        # inference only
        "import torch\nwith torch.no_grad(), torch.autocast(\"cuda\"):\n    for x in loader:\n        preds.append(model(x))\n",
        # fp16 teacher under no_grad, the trained student in float32
        "import torch\nfor x in loader:\n    with torch.no_grad(), torch.autocast(\"cuda\"):\n        t = teacher(x)\n"
        "    loss = kd_loss(student(x), t)\n    loss.backward()\n    opt.step()\n",
        # autocast in an evaluation loop; the training loop has none
        "import torch\nfor x in loader:\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n"
        "for x in val_loader:\n    with torch.autocast(\"cuda\"):\n        out = model(x)\n",
        # disabled, or accelerate scales for you
        "import torch\nfor x in loader:\n    with torch.autocast(\"cuda\", enabled=False):\n        loss = model(x).sum()\n"
        "    loss.backward()\n    opt.step()\n",
        "import torch\nfor batch in loader:\n    with torch.autocast(\"cuda\"):\n        loss = model(**batch).loss\n"
        "    accelerator.backward(loss)\n    opt.step()\n",
        # float16 picked only where the device is not CUDA (Apple's MPS): bfloat16 on the GPU
        "import torch\ndevice = torch.device(\"cuda\" if torch.cuda.is_available() else \"mps\")\n"
        "for x in loader:\n    ctx = torch.autocast(device_type=device.type,\n"
        "                         dtype=torch.bfloat16 if device.type in [\"cuda\", \"cpu\"] else torch.float16)\n"
        "    with ctx:\n        loss = model(x.to(device)).sum()\n    loss.backward()\n    opt.step()\n",
        # the device is a parameter: unknown
        "import torch\ndef train(model, loader, opt, device_type):\n    for x in loader:\n"
        "        with torch.autocast(device_type):\n            loss = model(x).sum()\n"
        "        loss.backward()\n        opt.step()\n",
        # a unit test of autocast: nothing steps an optimizer after its backward
        "import torch\ndef test_fp16_grads_exist():\n    layer = torch.nn.Linear(3, 1).cuda()\n"
        "    with torch.autocast(\"cuda\"):\n        out = layer(torch.ones(2, 3, device=\"cuda\")).sum()\n"
        "    out.backward()\n    assert layer.weight.grad is not None\n",
        # an autocast context bound to a name, in bfloat16
        "import torch\nfrom contextlib import nullcontext\n"
        "ctx = nullcontext() if device_type == \"cpu\" else torch.amp.autocast(device_type=device_type, dtype=torch.bfloat16)\n"
        "for x, y in loader:\n    with ctx:\n        loss = model(x, y)\n    loss.backward()\n"
        "    optimizer.step()\n    optimizer.zero_grad()\n",
        # the name bound to an autocast, then to a context that does nothing, before the loop
        "import torch\nfrom contextlib import nullcontext\n"
        "ctx = torch.amp.autocast(device_type=\"cuda\", dtype=torch.float16)\nctx = nullcontext()\n"
        "for x, y in loader:\n    with ctx:\n        loss = model(x, y)\n    loss.backward()\n"
        "    optimizer.step()\n    optimizer.zero_grad()\n",
        # `self.ctx` is an autocast in another class only
        "import torch\n\nclass Evaluator:\n    def __init__(self):\n"
        "        self.ctx = torch.autocast(\"cuda\", dtype=torch.float16)\n\n"
        "class Trainer:\n    def __init__(self):\n        self.ctx = torch.autograd.detect_anomaly()\n\n"
        "    def fit(self, loader):\n        for x, y in loader:\n            with self.ctx:\n"
        "                loss = self.model(x, y)\n                loss.backward()\n            self.opt.step()\n"
        "            self.opt.zero_grad()\n",
        # the plain backward runs only where the autocast does not: the same flag chose the forward
        "import torch\n\ndef train(model, loader, opt, use_amp, loss_scaler):\n    for x, y in loader:\n"
        "        if use_amp:\n            with torch.autocast(\"cuda\"):\n                loss = criterion(model(x), y)\n"
        "        else:\n            loss = criterion(model(x), y)\n        if use_amp:\n"
        "            loss_scaler(loss, opt)\n        else:\n            loss.backward()\n            opt.step()\n"
        "        opt.zero_grad()\n",
        # a backward meant to fail
        "import pytest\nimport torch\ndef check_frozen(layer, x, opt):\n    with torch.autocast(\"cuda\"):\n"
        "        loss = layer(x).mean()\n    with pytest.raises(RuntimeError):\n        loss.backward()\n    opt.step()\n",
    )
    INVALID = (
        # a context manager of the module entering CUDA's autocast (float16 by default)
        Invalid(
            "import contextlib\nimport torch\n\n\n@contextlib.contextmanager\n"
            "def torch_autocast(device_type=\"cuda\", **kwargs):\n"
            "    with torch.amp.autocast(device_type=device_type, **kwargs):\n        yield\n\n\n"
            "def train(model, loader, optimizer, use_fp16):\n    for x, y in loader:\n"
            "        with torch_autocast(enabled=use_fp16):\n            loss = model(x.cuda()).sum()\n"
            "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"
        ),
        # a scaler made in `__init__` that no backward goes through: the fix uses it
        Invalid(
            "import torch\nclass Trainer:\n    def __init__(self, model, optimizer):\n        self.model = model\n"
            "        self.optimizer = optimizer\n        self.scaler = torch.amp.GradScaler(\"cuda\")\n\n"
            "    def train_epoch(self, loader):\n        for x, y in loader:\n            self.optimizer.zero_grad()\n"
            "            with torch.autocast(\"cuda\", dtype=torch.float16):\n                loss = self.model(x, y)\n"
            "            loss.backward()\n            self.optimizer.step()\n",
            "import torch\nclass Trainer:\n    def __init__(self, model, optimizer):\n        self.model = model\n"
            "        self.optimizer = optimizer\n        self.scaler = torch.amp.GradScaler(\"cuda\")\n\n"
            "    def train_epoch(self, loader):\n        for x, y in loader:\n            self.optimizer.zero_grad()\n"
            "            with torch.autocast(\"cuda\", dtype=torch.float16):\n                loss = self.model(x, y)\n"
            "            self.scaler.scale(loss).backward()\n            self.scaler.step(self.optimizer)\n"
            "            self.scaler.update()\n",
        ),
        # the dtype is chosen at run time, and one choice is float16
        Invalid(
            "import torch\ndtype = \"bfloat16\" if torch.cuda.is_bf16_supported() else \"float16\"\n"
            "ptdtype = {\"float32\": torch.float32, \"bfloat16\": torch.bfloat16, \"float16\": torch.float16}[dtype]\n"
            "for x, y in loader:\n    with torch.autocast(\"cuda\", dtype=ptdtype):\n        loss = model(x, y)\n"
            "    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n",
            "import torch\ndtype = \"bfloat16\" if torch.cuda.is_bf16_supported() else \"float16\"\n"
            "ptdtype = {\"float32\": torch.float32, \"bfloat16\": torch.bfloat16, \"float16\": torch.float16}[dtype]\n"
            "scaler = torch.amp.GradScaler(\"cuda\")\n"
            "for x, y in loader:\n    with torch.autocast(\"cuda\", dtype=ptdtype):\n        loss = model(x, y)\n"
            "    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n    scaler.update()\n    optimizer.zero_grad()\n",
        ),
        # the context chosen by `if`/`else`: float16 autocast, or nothing
        Invalid(
            "import torch\nfrom contextlib import nullcontext\nif use_amp:\n"
            "    ctx = torch.autocast(\"cuda\", dtype=torch.float16)\nelse:\n    ctx = nullcontext()\n"
            "for x, y in loader:\n    with ctx:\n        loss = model(x, y)\n    loss.backward()\n"
            "    optimizer.step()\n    optimizer.zero_grad()\n",
            "import torch\nfrom contextlib import nullcontext\nif use_amp:\n"
            "    ctx = torch.autocast(\"cuda\", dtype=torch.float16)\nelse:\n    ctx = nullcontext()\n"
            "scaler = torch.amp.GradScaler(\"cuda\")\n"
            "for x, y in loader:\n    with ctx:\n        loss = model(x, y)\n    scaler.scale(loss).backward()\n"
            "    scaler.step(optimizer)\n    scaler.update()\n    optimizer.zero_grad()\n",
        ),
        # the autocast context bound to a name first (`with ctx:`), float16 on one branch of the choice
        Invalid(
            "import torch\nfrom contextlib import nullcontext\n"
            "dtype = \"bfloat16\" if torch.cuda.is_bf16_supported() else \"float16\"\n"
            "ptdtype = {\"bfloat16\": torch.bfloat16, \"float16\": torch.float16}[dtype]\n"
            "ctx = nullcontext() if device_type == \"cpu\" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)\n"
            "for x, y in loader:\n    with ctx:\n        loss = model(x, y)\n    loss.backward()\n"
            "    optimizer.step()\n    optimizer.zero_grad()\n",
            "import torch\nfrom contextlib import nullcontext\n"
            "dtype = \"bfloat16\" if torch.cuda.is_bf16_supported() else \"float16\"\n"
            "ptdtype = {\"bfloat16\": torch.bfloat16, \"float16\": torch.float16}[dtype]\n"
            "ctx = nullcontext() if device_type == \"cpu\" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)\n"
            "scaler = torch.amp.GradScaler(\"cuda\")\n"
            "for x, y in loader:\n    with ctx:\n        loss = model(x, y)\n    scaler.scale(loss).backward()\n"
            "    scaler.step(optimizer)\n    scaler.update()\n    optimizer.zero_grad()\n",
        ),
        Invalid(
            "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x, y in loader:\n"
            "    with torch.autocast(\"cuda\"):\n        loss = criterion(model(x), y)\n    loss.backward()\n"
            "    opt.step()\n    opt.zero_grad()\n",
            "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nscaler = torch.amp.GradScaler(\"cuda\")\n"
            "for x, y in loader:\n    with torch.autocast(\"cuda\"):\n        loss = criterion(model(x), y)\n"
            "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n    opt.zero_grad()\n",
        ),
        # from torch.amp import autocast; device_type=str(device); clipping; `scaler` taken; epochs
        Invalid(
            "import torch\nfrom torch.amp import autocast\nscaler = 2\ndevice = torch.device(\"cuda\")\n"
            "for epoch in range(3):\n    for x in loader:\n        with autocast(device_type=str(device), dtype=torch.float16):\n"
            "            out = model(x)\n        loss = (out.float() ** 2).mean()\n        (loss / 4).backward()\n"
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n        optimizer.step()\n",
            "import torch\nfrom torch.amp import autocast\nscaler = 2\ndevice = torch.device(\"cuda\")\n"
            "grad_scaler = torch.amp.GradScaler(\"cuda\")\nfor epoch in range(3):\n    for x in loader:\n"
            "        with autocast(device_type=str(device), dtype=torch.float16):\n            out = model(x)\n"
            "        loss = (out.float() ** 2).mean()\n        grad_scaler.scale(loss / 4).backward()\n"
            "        grad_scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
            "        grad_scaler.step(optimizer)\n        grad_scaler.update()\n",
        ),
        # the device is a parameter whose default is CUDA
        Invalid(
            "import torch\n\ndef fit(model, loader, opt, device=\"cuda\"):\n    for x, y in loader:\n"
            "        with torch.autocast(device_type=str(device)):\n            loss = criterion(model(x.to(device)), y)\n"
            "        loss.backward()\n        opt.step()\n        opt.zero_grad()\n",
            "import torch\n\ndef fit(model, loader, opt, device=\"cuda\"):\n    scaler = torch.amp.GradScaler(\"cuda\")\n"
            "    for x, y in loader:\n        with torch.autocast(device_type=str(device)):\n"
            "            loss = criterion(model(x.to(device)), y)\n        scaler.scale(loss).backward()\n"
            "        scaler.step(opt)\n        scaler.update()\n        opt.zero_grad()\n",
        ),
        # the device is a module constant
        Invalid(
            "import torch\nDEVICE = torch.device(\"cuda:0\")\nfor x, y in loader:\n    with torch.autocast(DEVICE.type):\n"
            "        loss = criterion(model(x.to(DEVICE)), y)\n    loss.backward()\n    opt.step()\n    opt.zero_grad()\n",
            "import torch\nDEVICE = torch.device(\"cuda:0\")\nscaler = torch.amp.GradScaler(\"cuda\")\nfor x, y in loader:\n"
            "    with torch.autocast(DEVICE.type):\n        loss = criterion(model(x.to(DEVICE)), y)\n"
            "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n    opt.zero_grad()\n",
        ),
        # the plain backward runs where another flag fails: fp16 with the scaler turned off
        Invalid(
            "import torch\n\ndef train(model, loader, opt, use_amp, use_scaler):\n    for x, y in loader:\n"
            "        if use_amp:\n            with torch.autocast(\"cuda\"):\n                loss = criterion(model(x), y)\n"
            "        else:\n            loss = criterion(model(x), y)\n        if use_scaler:\n"
            "            scaled_step(loss, opt)\n        else:\n            loss.backward()\n            opt.step()\n"
            "        opt.zero_grad()\n",
            "import torch\n\ndef train(model, loader, opt, use_amp, use_scaler):\n"
            "    scaler = torch.amp.GradScaler(\"cuda\")\n    for x, y in loader:\n"
            "        if use_amp:\n            with torch.autocast(\"cuda\"):\n                loss = criterion(model(x), y)\n"
            "        else:\n            loss = criterion(model(x), y)\n        if use_scaler:\n"
            "            scaled_step(loss, opt)\n        else:\n            scaler.scale(loss).backward()\n"
            "            scaler.step(opt)\n            scaler.update()\n        opt.zero_grad()\n",
        ),
        # the deprecated spelling, the step in a helper: reported without a fix
        Invalid(
            "import torch\n\ndef update():\n    opt.step()\n\nwhile True:\n    with torch.cuda.amp.autocast():\n"
            "        loss = model(next(it)).mean()\n    loss.backward()\n    update()\n"
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (type(func) is cst.Attribute and func.attr.value == "backward"):
            return  # (torch.autograd.backward included: its func is an attribute too)
        facts = self.facts
        if not facts.regions.autocasts:
            return
        backward = facts.roles.backward_of(node)
        if backward is None or backward.kind not in ("method", "autograd") or \
                not facts.values.accumulates_grad(backward):
            return
        if facts.roles.uses_grad_scaler or facts.benchmark_file or not facts.phase.backward_trains(node):
            return  # (a unit test looking at gradients, or a backward meant to fail, does not train)
        loops = facts.tree.loops_around(node)
        root: cst.CSTNode = loops[0] if loops else facts.tree.scope_of(node)
        autocast = self._fp16_region(facts, backward, root)
        if autocast is None:
            return
        dtypes = facts.regions.autocast_dtypes(autocast)
        where = "CUDA's default dtype" if autocast.dtype is None else "float16" if dtypes == _FP16 else \
            "its dtype can be float16, where the run picks it"
        unread = self._unread_scaler(loops[0]) if loops else None
        scaler = f"`{unread}` (made, but no backward goes through it)" if unread else self._scaler_advice()
        message = (f"this loss is computed under float16 autocast ({where}) and backwarded without a GradScaler: "
                   f"gradients smaller than ~6e-8 (float16's smallest subnormal) become exactly zero; scale the loss "
                   f"with {scaler}, or autocast to bfloat16")
        self.report(node, message, self._fix(facts, backward, loops, unread) if loops else None)

    @staticmethod
    def _fp16_region(facts: Facts, backward: Backward, root: cst.CSTNode) -> Optional[Autocast]:
        tree = facts.tree
        roots = [root, *facts.calls.functions_reached(root)]
        nodes, functions = facts.values.origins(backward)
        for autocast in facts.regions.autocasts_for(roots, backward.call):
            region = autocast.region.node
            if autocast.enabled is False:
                continue
            devices = facts.regions.autocast_devices(autocast)
            dtypes = facts.regions.autocast_dtypes(autocast)
            if devices is not None and "cuda" not in devices or dtypes is None or not _FP16 <= dtypes:
                continue  # not on the GPU, or not (possibly) float16
            body = region.body.body
            if not body or facts.regions.grad_enabled(body[0]) is not True:
                continue  # inference under no_grad
            feeds = tree.contains(region, backward.call) or any(
                tree.contains(region, n) and not facts.guards.exclusive(n, backward.call) for n in nodes) or any(
                tree.contains(f, region) and facts.values.returns_grad(f) for f in functions)
            if feeds:
                return autocast
        return None

    def _fix(self, facts: Facts, backward: Backward, loops: List[cst.CSTNode],
             unread: Optional[str]) -> Optional[Fix]:
        """`unread`: the scaler the module made and never used, which the fix goes through."""
        loop = loops[0]
        func = backward.call.func
        tree = facts.tree
        statement = tree.statement_of(backward.call)
        if backward.kind != "method" or statement is None or not type(func) is cst.Attribute:
            return None
        if len(facts.roles.backwards_in(loop)) != 1:
            return None
        steps = [(s, site) for s, site in facts.roles.steps_in(loop)]
        if len(steps) != 1 or steps[0][0].call is not steps[0][1]:
            return None
        step = steps[0][0]
        step_statement = tree.statement_of(step.call)
        if step_statement is None or step.scaler is not None or step.call.args or step.optimizer is None:
            return None
        order = tree.order
        if not order(statement) < order(step_statement) or tree.loops_around(step.call)[:1] != [loop]:
            return None
        calls = list(facts.calls.calls_in(loop))
        clips = [(call, site) for call, site in calls if facts.roles.is_grad_clip(call)]
        if any(call is not site for call, site in clips) or len(clips) > 1:
            return None
        if any("clip_grad" in (dotted_name(call.func) or "") and not facts.roles.is_grad_clip(call) for call, _ in calls):
            return None  # `model.clip_grad_norm_(...)` (FSDP), `accelerator.clip_grad_norm_`: not ours to unscale
        clip_statement = tree.statement_around(clips[0][0]) if clips else None
        if clip_statement is not None and not order(statement) < order(clip_statement) < order(step_statement):
            return None
        scaled_until = clip_statement if clip_statement is not None else step_statement
        if any(facts.roles.grad_reads(f.body) for f in facts.calls.functions_reached(loop)) or any(
                order(statement) < order(read) < order(scaled_until) for read in facts.roles.grad_reads(loop)):
            return None  # gradients read while still scaled
        optimizer = step.call.func.value  # type: ignore[attr-defined]
        edits: List[Edit] = []
        scaler = unread
        fresh = scaler is None  # a scaler made before the loop, not the one the module made and forgot
        if not fresh:
            made = show(facts.roles.unread_grad_scalers[scaler])  # type: ignore[index]
        else:
            made = self._made_scaler()  # type: ignore[assignment]
            if made is None:
                return None
            taken = self.facts.identifiers
            scaler = next(n for n in ("scaler", "grad_scaler", "amp_scaler", *(f"scaler_{i}" for i in range(2, 1000)))
                          if n not in taken)
            edits.append(InsertBefore(loops[-1], (cst.parse_statement(f"{scaler} = {made}"),)))  # type: ignore[arg-type]
        held = cst.parse_expression(scaler)
        edits += [
            Replace(func, func.with_changes(value=cst.Call(
                cst.Attribute(held, cst.Name("scale")), [cst.Arg(_bare(func.value))]))),
            Replace(step.call, cst.Call(cst.Attribute(held, cst.Name("step")), [cst.Arg(optimizer)])),
            InsertAfter(step_statement, (cst.parse_statement(f"{scaler}.update()"),)),  # type: ignore[arg-type]
        ]
        if clip_statement is not None:
            unscale = cst.parse_statement(f"{scaler}.unscale_({step.optimizer})")
            edits.append(InsertBefore(clip_statement, (unscale,)))  # type: ignore[arg-type]
        # a function called again and again (`train_one_epoch`) would start a fresh scaler each call
        function = tree.function_of(loops[-1])
        repeated = function is not None and any(tree.loops_around(site) for site in facts.scopes.call_sites(function))
        return Fix(tuple(edits), Safety.UNSAFE if repeated and fresh else Safety.SAFE,
                   f"scale the loss with `{scaler} = {made}`, step through it" if fresh else
                   f"scale the loss with `{scaler}`, made but not used, step through it",
                   min_torch=_CUDA_GRAD_SCALER_SINCE if self._old_torch() else _GRAD_SCALER_SINCE)

    def _unread_scaler(self, loop: cst.CSTNode) -> Optional[str]:
        """The GradScaler this module makes and never reads, where the loop can reach it: a name
        of the module, or an attribute of the loop's own instance (`self.scaler`, made in
        `__init__`)."""
        tree = self.facts.tree
        function = tree.function_of(loop)
        klass = tree.class_of(function) if function is not None else None
        bound_method = function is not None and klass is not None and not function.decorators and \
            [p.name.value for p in function.params.params[:1]] == ["self"]
        for bound, call in self.facts.roles.unread_grad_scalers.items():
            where = tree.function_of(call)
            line = tree.statement_around(call)
            always = line is not None and tree.parent(line) is (where.body if where is not None else tree.module)
            if not always:
                continue  # made only on some runs (`if args.amp:`): the fix would use it on every one
            if "." not in bound and where is None or \
                    bound.startswith("self.") and bound.count(".") == 1 and bound_method and \
                    where is not None and tree.class_of(where) is klass:
                return bound
        return None

    def _old_torch(self) -> bool:
        """The project supports a torch without `torch.amp.GradScaler` (before 2.3)."""
        target = self.target_torch
        return target is not None and target < _GRAD_SCALER_SINCE

    def _made_scaler(self) -> Optional[str]:
        """The expression making the scaler, as this module spells torch: on a project that
        supports torch before 2.3, the class each torch has, chosen by the test MEM402 asks for
        (so the fixed code is not reported again); None when torch is not imported as itself."""
        new = self.facts.names.local_name_for("torch.amp.GradScaler")
        if new is None:
            return None
        if not self._old_torch():
            return f"{new}(\"cuda\")"
        torch = self.facts.names.local_name_for("torch")
        if torch is None:
            return None
        test = exists_test("torch.amp.GradScaler", torch, self.target_torch)
        return f"{new}(\"cuda\") if {test} else {torch}.cuda.amp.GradScaler()"

    def _scaler_advice(self) -> str:
        """The GradScaler to make, on every torch the project supports."""
        if self._old_torch():
            return "`torch.amp.GradScaler(\"cuda\")` (torch 2.3 and later; `torch.cuda.amp.GradScaler()` before)"
        return "`torch.amp.GradScaler(\"cuda\")`"
