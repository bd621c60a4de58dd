"""MEM404 backward-under-autocast."""

from __future__ import annotations

from typing import Optional, Sequence

import libcst as cst

from memlint.analysis import Facts
from memlint.analysis.tree import dotted_name
from memlint.findings import Fix, InsertAfter, Replace, Safety
from memlint.rule import Claim, Invalid, Rule

# Calls that belong to the step after a backward and compute nothing autocast would cast.
_STEP_METHODS = frozenset({"update", "unscale_"})


def _step_part(facts: Facts, stmt: cst.CSTNode) -> bool:
    """A statement that is only a backward, an optimizer or scheduler step, a gradient reset,
    clipping, or `scaler.update()` / `scaler.unscale_(opt)`."""
    if not type(stmt) is cst.SimpleStatementLine or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if type(small) is cst.Expr:
        call = small.value
    elif type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name:
        call = small.value  # grad_norm = clip_grad_norm_(...)
        if not (type(call) is cst.Call and facts.roles.is_grad_clip(call)):
            return False
    else:
        return False
    if not type(call) is cst.Call:
        return False
    roles = facts.roles
    if roles.backward_of(call) or roles.step_of(call) or roles.resets_grads(call) or roles.is_grad_clip(call):
        return True
    func = call.func
    if type(func) is cst.Attribute:
        receiver = (dotted_name(func.value) or "").lower()
        if func.attr.value in _STEP_METHODS and "scaler" in receiver:
            return True
        if func.attr.value == "step" and "sched" in receiver:
            return True
    return False


_CPU_ONLY = frozenset({"cpu"})  # an autocast region that runs on the CPU alone

class BackwardUnderAutocast(Rule):
    """
    ## What it does
    Finds `backward()` called inside a `with torch.autocast(...)` block.

    ## Why is this bad?
    PyTorch recommends autocast around the forward pass and the loss only: the backward of each
    operation already runs in the dtype autocast chose for its forward, so autocast around the
    backward does nothing useful, and everything else in the block (the optimizer step,
    clipping, logging) runs under autocast too, where it can be cast in ways nobody meant.

    ## Why it is opt-in
    It claims nothing a GPU can measure: the backward computes the same gradients, in the same
    dtypes, inside the block or out of it. Read on real code (docs/real-code.md), none of its
    findings was worth a change to a maintainer: timm's benchmark, three AutoGPTQ examples
    vendored into OLMo, and DALLE2's VQGAN trainer, whose autocast is off by default. Select it
    for the tidier step PyTorch recommends.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    Use instead:
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    ```

    ## When it is not reported
    A backward that does not train (no optimizer step can follow it: a unit test documenting
    autocast) or is meant to fail (`pytest.raises`), autocast with `enabled=False`, and a CPU
    autocast (`torch.cpu.amp.autocast`, `torch.autocast("cpu")`: no device memory at stake, and
    its backward's gradients are the same).

    ## Fix
    Moves the backward and what follows it out of the block, when those are the block's last
    statements and each is part of the step (a backward, an optimizer or scheduler step,
    `zero_grad`, clipping, `scaler.update()` / `scaler.unscale_()`), and the `with` has autocast
    as its only context manager. Otherwise it only reports.

    ## Fix safety
    Safe: the backward computes the same gradients outside autocast, and the moved step calls
    run in float32 anyway.
    """

    CODE = "MEM404"
    DEFAULT_ON = False
    NAME = "backward-under-autocast"
    MESSAGE = "`backward()` runs inside the autocast block; autocast should wrap only the forward pass and the loss"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.NONE

    VALID = (
        # a context manager's autocast, which steps after its yield: the backward belongs inside
        "import contextlib\nimport torch\n\n\n@contextlib.contextmanager\n"
        "def train_step(model, optimizer):\n    optimizer.zero_grad(set_to_none=True)\n"
        "    with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n        yield\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    optimizer.step()\n\n\n"
        "def train(model, loader, optimizer, criterion):\n    for x, y in loader:\n"
        "        with train_step(model, optimizer):\n"
        "            loss = criterion(model(x.cuda()), y.cuda())\n            loss.backward()\n",
        "import torch\nfor x in loader:\n    with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n"
        "        loss = model(x).sum()\n    loss.backward()\n    opt.step()\n",
        # disabled autocast around the backward is harmless
        "import torch\nwith torch.autocast(\"cuda\", enabled=False):\n    loss.backward()\n",
        # a backward in a function defined inside the block runs later, outside it
        "import torch\nwith torch.autocast(\"cuda\"):\n    def closure():\n        loss = model(x).sum()\n"
        "        loss.backward()\n        return loss\nopt.step(closure)\n",
        # a partial of something else
        "import torch\nfrom functools import partial\nclass Runner:\n    def __init__(self):\n"
        "        self.ctx = partial(torch.no_grad)\n    def run(self, loader):\n        for x in loader:\n"
        "            with self.ctx():\n                loss = self.model(x).mean()\n                loss.backward()\n"
        "            self.optimizer.step()\n",
        # something else called backward
        "import torch\nwith torch.autocast(\"cuda\"):\n    out = model(x)\n    planner.backward()\n",
        # a unit test documenting autocast: no optimizer step follows, one backward meant to fail
        "import pytest\nimport torch\ndef test_cache_keeps_grad_mode():\n    layer = torch.nn.Linear(2, 1)\n"
        "    with torch.autocast(\"cpu\", dtype=torch.bfloat16):\n        loss = layer(torch.ones(1, 2)).mean()\n"
        "        loss.backward()\n        assert layer.weight.grad is not None\n"
        "        with pytest.raises(RuntimeError):\n            loss.backward()\n",
        # a CPU autocast (IPEX's bf16 training): no device memory at stake
        "import torch\nfor x in loader:\n    with torch.cpu.amp.autocast(dtype=torch.bfloat16):\n"
        "        loss = model(x).mean()\n        loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n",
        "import torch\nfor x in loader:\n    with torch.autocast(\"cpu\", dtype=torch.bfloat16):\n"
        "        loss = model(x).mean()\n        loss.backward()\n    optimizer.step()\n",
    )
    INVALID = (
        Invalid(
            "import torch\nfor x in loader:\n    with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n"
            "        loss = criterion(model(x), y)\n        loss.backward()\n        opt.step()\n        opt.zero_grad()\n"
            "    print(loss.item())\n",
            "import torch\nfor x in loader:\n    with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n"
            "        loss = criterion(model(x), y)\n    loss.backward()\n    opt.step()\n    opt.zero_grad()\n"
            "    print(loss.item())\n",
        ),
        Invalid(
            "import torch\nfrom torch.amp import autocast\nwith autocast(\"cuda\"):\n    loss = model(x).mean()\n"
            "    scaler.scale(loss).backward()\n    scaler.unscale_(opt)\n"
            "    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    scaler.step(opt)\n"
            "    scaler.update()\n",
            "import torch\nfrom torch.amp import autocast\nwith autocast(\"cuda\"):\n    loss = model(x).mean()\n"
            "scaler.scale(loss).backward()\nscaler.unscale_(opt)\n"
            "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(opt)\nscaler.update()\n",
        ),
        # a partial of autocast, bound to an attribute (`suppress` when AMP is off)
        Invalid(
            "import torch\nfrom contextlib import suppress\nfrom functools import partial\nclass Runner:\n"
            "    def __init__(self, amp):\n        if amp:\n"
            "            self.amp_autocast = partial(torch.autocast, device_type='cuda', dtype=torch.bfloat16)\n"
            "        else:\n            self.amp_autocast = suppress\n\n    def run(self, loader):\n"
            "        for x in loader:\n            with self.amp_autocast():\n                loss = self.model(x).mean()\n"
            "                loss.backward()\n            self.optimizer.step()\n"
        ),
        # something else follows the backward in the block: reported, not moved
        Invalid(
            "import torch\nwith torch.autocast(\"cuda\", dtype=torch.bfloat16):\n    loss = model(x).sum()\n"
            "    loss.backward()\n    acc = model(x2).argmax(-1)\nopt.step()\n"
        ),
        # a loss module moved to the device is a loss still
        Invalid(
            "import torch\nclass Bench:\n    def __init__(self, device):\n"
            "        self.loss = torch.nn.CrossEntropyLoss().to(device)\n\n    def step(self, x, y):\n"
            "        with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n            out = self.model(x)\n"
            "            self.loss(out, y).backward()\n        self.optimizer.step()\n",
            "import torch\nclass Bench:\n    def __init__(self, device):\n"
            "        self.loss = torch.nn.CrossEntropyLoss().to(device)\n\n    def step(self, x, y):\n"
            "        with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n            out = self.model(x)\n"
            "        self.loss(out, y).backward()\n        self.optimizer.step()\n",
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
        if backward is None or backward.kind == "grad" or not facts.values.accumulates_grad(backward):
            return
        if not facts.phase.backward_trains(node):
            return  # a unit test documenting autocast, a backward meant to fail: not a training step
        autocast = facts.regions.autocast_at(node)
        if autocast is None or autocast.enabled is False or autocast.wrapped or \
                facts.regions.autocast_devices(autocast) == _CPU_ONLY:
            return  # (a CPU autocast: no device memory, and its backward's gradients are the same; a
            # context manager's autocast may step or sync around its yield, and wants the backward inside)
        self.report(node, fix=self._fix(facts, node, autocast.region.node))

    @staticmethod
    def _fix(facts: Facts, call: cst.Call, with_node: cst.With) -> Optional[Fix]:
        block = with_node.body
        if len(with_node.items) != 1 or not type(block) is cst.IndentedBlock:
            return None
        statement = facts.tree.statement_of(call)
        body: Sequence[cst.BaseStatement] = block.body
        index = next((i for i, stmt in enumerate(body) if stmt is statement), -1)
        if index < 1:  # not a statement of the block itself, or nothing would stay in it
            return None
        moved = tuple(body[index:])
        if not all(_step_part(facts, stmt) for stmt in moved):
            return None
        kept = with_node.with_changes(body=block.with_changes(body=tuple(body[:index])))
        return Fix((Replace(with_node, kept), InsertAfter(with_node, moved)), Safety.SAFE,
                   "move the backward and the step after the autocast block")
