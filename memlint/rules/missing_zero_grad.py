"""MEM301 missing-zero-grad."""

from __future__ import annotations

from bisect import bisect_left
from typing import List, Optional, Tuple

import libcst as cst

from memlint.analysis import Facts
from memlint.analysis.roles import Backward, OptimizerStep
from memlint.analysis.tree import dotted_name
from memlint.findings import Fix, InsertAfter, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.torch_target import TorchVersion

Loop = cst.CSTNode  # For | While
_SET_TO_NONE_SINCE = TorchVersion(1, 7)  # `zero_grad(set_to_none=...)`


def owned_by(facts: Facts, loop: Loop, call: cst.Call, site: cst.Call) -> bool:
    """Whether `loop` is the innermost loop that runs `call` (reached through `site`) every iteration."""
    if call is site:
        return facts.tree.loops_around(call)[:1] == [loop]
    return not facts.tree.loops_around(call) and facts.tree.loops_around(site)[:1] == [loop]


class MissingZeroGrad(Rule):
    """
    ## What it does
    Finds a loop that calls `backward()` and steps a torch optimizer every iteration (itself, or
    in a helper it calls) but never clears the gradients inside the loop: no
    `optimizer.zero_grad()`, `model.zero_grad()` or `p.grad = None` per step. A `zero_grad()`
    above the loop runs once, so it counts as missing.

    ## Why is this bad?
    `backward()` adds into `.grad`. Without a reset every step applies the sum of all gradients
    so far: in a measured run the gradient norm was ~5x the single-batch one after 5 steps and
    the updates grow without bound. It is a correctness bug, not a leak: peak memory stayed flat.

    ## Example
    ```python
    optimizer.zero_grad()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    Use instead:
    ```python
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    ```

    ## When it is not reported
    Gradient accumulation (`if (i + 1) % k == 0: opt.step(); opt.zero_grad()`), any reset in a
    `with`, `if` or `try` of the loop or in a helper it calls, `accelerator.accumulate(...)`,
    Lightning and HF Trainer loops (they reset for you), `torch.autograd.grad` (it does not
    accumulate), and `.step()` of anything not known to be an optimizer (`env.step()`): an
    optimizer is built from `torch.optim.*` or a known factory, annotated as one, used with
    `.zero_grad()` / `.param_groups`, passed by every call of the function it is a parameter
    of, or, where no call of this module passes it, a parameter named like one
    (`def train(model, loader, optimizer)`), and an attribute a class sets only from such
    names (`self.optimizer = optimizer` in `__init__`).

    ## Fix
    Inserts `optimizer.zero_grad(set_to_none=True)` right after the step (after
    `scaler.update()` when that follows it), in the same block, for each optimizer stepped.

    ## Fix safety
    Safe: gradients are read only between the backward and the step, where they now hold the
    current batch's. Unsafe when `.grad` is read elsewhere in the loop, after it, or in a
    helper: there it now finds `None`. No fix when the step happens in a helper.
    """

    CODE = "MEM301"
    NAME = "missing-zero-grad"
    MESSAGE = ("gradients are never cleared per step: each `backward()` adds to all earlier ones "
               "(a correctness bug, not a leak)")
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.GRADIENTS_FIXED

    VALID = (
        # gradient accumulation: cleared every k steps
        "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor i, (x, y) in enumerate(loader):\n"
        "    loss = criterion(model(x), y) / k\n    loss.backward()\n    if (i + 1) % k == 0:\n"
        "        opt.step()\n        opt.zero_grad()\n",
        # zero_grad nested in with / try
        "import torch\nopt = torch.optim.Adam(model.parameters())\nwhile step < n:\n"
        "    with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n        loss = model(x).sum()\n"
        "        try:\n            opt.zero_grad()\n        except RuntimeError:\n            pass\n"
        "    loss.backward()\n    opt.step()\n",
        # model.zero_grad() and p.grad = None
        "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in loader:\n"
        "    model.zero_grad()\n    model(x).sum().backward()\n    opt.step()\n",
        "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in loader:\n"
        "    model(x).sum().backward()\n    opt.step()\n    for p in model.parameters():\n        p.grad = None\n",
        # the reset lives in a helper the loop calls
        "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n\ndef reset():\n    opt.zero_grad()\n\n"
        "for x in loader:\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n    reset()\n",
        # env.step() and planner.backward() are not an optimizer step and a loss backward
        "import torch\nfor t in range(100):\n    loss = model(x).sum()\n    loss.backward()\n    obs = env.step(action)\n",
        "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nplanner = Planner()\n"
        "for t in range(100):\n    planner.backward()\n    opt.step()\n",
        # a parameter that is not known to be an optimizer: stay silent
        "import torch\ndef train(model, planner, loader):\n    for x in loader:\n"
        "        loss = model(x).sum()\n        loss.backward()\n        planner.step()\n",
        # ... nor an attribute a class sets from one (or from one named like anything else, elsewhere)
        "import torch\nclass Runner:\n    def __init__(self, model, planner):\n        self.model = model\n"
        "        self.planner = planner\n    def fit(self, loader):\n        for x in loader:\n"
        "            self.model(x).sum().backward()\n            self.planner.step()\n",
        "import torch\nclass Trainer:\n    def __init__(self, model, optimizer):\n        self.model = model\n"
        "        self.optimizer = optimizer\n    def fit(self, loader):\n        for x in loader:\n"
        "            self.model(x).sum().backward()\n            self.optimizer.step()\n"
        "    def swap(self, stepper):\n        self.optimizer = stepper\n",
        # ... a trainer this module builds with a wrapper that clears on its own step
        "import torch\nclass ScheduledOptim:\n    def __init__(self, optimizer):\n        self._optimizer = optimizer\n"
        "    def step(self):\n        self._optimizer.step()\n        self._optimizer.zero_grad()\n\n"
        "class Trainer:\n    def __init__(self, model, optimizer):\n        self.model = model\n"
        "        self.optimizer = optimizer\n    def fit(self, loader):\n        for x in loader:\n"
        "            self.model(x).sum().backward()\n            self.optimizer.step()\n\n"
        "Trainer(model, ScheduledOptim(torch.optim.Adam(model.parameters()))).fit(loader)\n",
        # ... a trainer whose base class, defined elsewhere, runs a hook that may clear them
        "import torch\nfrom .base import BaseTrainer\nclass Trainer(BaseTrainer):\n"
        "    def __init__(self, model, optimizer):\n        self.model = model\n        self.optimizer = optimizer\n"
        "    def fit(self, loader):\n        for x in loader:\n            self.before_batch()\n"
        "            self.model(x).sum().backward()\n            self.optimizer.step()\n",
        # distributed autograd accumulates into its context, which every iteration makes afresh
        "import torch\nimport torch.distributed.autograd as dist_autograd\n"
        "from torch.distributed.optim import DistributedOptimizer\n"
        "opt = DistributedOptimizer(torch.optim.SGD, model.parameter_rrefs(), lr=0.05)\nfor x in loader:\n"
        "    with dist_autograd.context() as cid:\n        loss = model(x).sum()\n"
        "        dist_autograd.backward(cid, [loss])\n        opt.step(cid)\n",
        # accelerate's accumulate, Lightning, HF Trainer
        "import torch\nopt = torch.optim.AdamW(model.parameters())\nfor batch in loader:\n"
        "    with accelerator.accumulate(model):\n        loss = model(**batch).loss\n"
        "        accelerator.backward(loss)\n        opt.step()\n",
        "import lightning as L\nimport torch\nclass M(L.LightningModule):\n    def training_step(self, batch, i):\n"
        "        return self.net(batch).sum()\n    def configure_optimizers(self):\n"
        "        return torch.optim.Adam(self.parameters())\n",
        "import torch\nfrom transformers import Trainer\ntrainer = Trainer(model=model, args=args)\ntrainer.train()\n",
        # a hook on the step clears the gradients
        "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "opt.register_step_post_hook(lambda o, args, kwargs: o.zero_grad())\nfor x in loader:\n"
        "    model(x).sum().backward()\n    opt.step()\n",
        # torch.autograd.grad does not accumulate into .grad
        "import torch\nopt = torch.optim.SGD(params, lr=0.1)\nfor x in loader:\n"
        "    grads = torch.autograd.grad(model(x).sum(), params)\n    for p, g in zip(params, grads):\n"
        "        p.grad = g\n    opt.step()\n",
        # backward in the loop, one step after it: accumulation on purpose
        "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nopt.zero_grad()\nfor x in chunks:\n"
        "    loss = model(x).sum()\n    loss.backward()\nopt.step()\n",
    )
    INVALID = (
        # zero_grad above the loop only
        Invalid(
            "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nopt.zero_grad()\nfor x, y in loader:\n"
            "    loss = criterion(model(x), y)\n    loss.backward()\n    opt.step()\n",
            "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nopt.zero_grad()\nfor x, y in loader:\n"
            "    loss = criterion(model(x), y)\n    loss.backward()\n    opt.step()\n"
            "    opt.zero_grad(set_to_none=True)\n",
        ),
        # a training function's optimizer parameter, which a script beside it passes
        Invalid(
            "import torch\ndef train(model, optimizer, loader):\n    for x in loader:\n"
            "        loss = model(x).sum()\n        loss.backward()\n        optimizer.step()\n",
            "import torch\ndef train(model, optimizer, loader):\n    for x in loader:\n"
            "        loss = model(x).sum()\n        loss.backward()\n        optimizer.step()\n"
            "        optimizer.zero_grad(set_to_none=True)\n",
        ),
        # a model's own `fit` loop, which also casts itself (`self.float()`: torch's, no hook)
        Invalid(
            "import torch\nimport torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.fc = nn.Linear(4, 2)\n"
            "        self.opt = torch.optim.SGD(self.parameters(), lr=0.1)\n    def forward(self, x):\n"
            "        return self.fc(x)\n    def fit(self, loader):\n        for x, y in loader:\n"
            "            loss = nn.functional.cross_entropy(self(x), y)\n            loss.backward()\n"
            "            self.opt.step()\n            self.float()\n",
            "import torch\nimport torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.fc = nn.Linear(4, 2)\n"
            "        self.opt = torch.optim.SGD(self.parameters(), lr=0.1)\n    def forward(self, x):\n"
            "        return self.fc(x)\n    def fit(self, loader):\n        for x, y in loader:\n"
            "            loss = nn.functional.cross_entropy(self(x), y)\n            loss.backward()\n"
            "            self.opt.step()\n            self.opt.zero_grad(set_to_none=True)\n            self.float()\n",
        ),
        # ... handed to a trainer class, which keeps it on the instance
        Invalid(
            "import torch\nclass Trainer:\n    def __init__(self, model, optimizer):\n        self.model = model\n"
            "        self.optimizer = optimizer\n    def fit(self, loader):\n        for x in loader:\n"
            "            self.model(x).sum().backward()\n            self.optimizer.step()\n",
            "import torch\nclass Trainer:\n    def __init__(self, model, optimizer):\n        self.model = model\n"
            "        self.optimizer = optimizer\n    def fit(self, loader):\n        for x in loader:\n"
            "            self.model(x).sum().backward()\n            self.optimizer.step()\n"
            "            self.optimizer.zero_grad(set_to_none=True)\n",
        ),
        # a while loop, the step under autocast, the optimizer an attribute
        Invalid(
            "import torch\nclass T:\n    def __init__(self, model):\n"
            "        self.opt = torch.optim.AdamW(model.parameters())\n    def fit(self):\n"
            "        while self.step < self.total:\n            with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n"
            "                loss = self.model(self.batch()).mean()\n            loss.backward()\n"
            "            self.opt.step()\n            self.step += 1\n",
            "import torch\nclass T:\n    def __init__(self, model):\n"
            "        self.opt = torch.optim.AdamW(model.parameters())\n    def fit(self):\n"
            "        while self.step < self.total:\n            with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n"
            "                loss = self.model(self.batch()).mean()\n            loss.backward()\n"
            "            self.opt.step()\n            self.opt.zero_grad(set_to_none=True)\n            self.step += 1\n",
        ),
        # zero_grad once per epoch: gradients still sum over the batches
        Invalid(
            "import torch\noptimizer = torch.optim.SGD(net.parameters(), lr=0.1)\nfor epoch in range(10):\n"
            "    optimizer.zero_grad()\n    for x in loader:\n        loss = net(x).sum()\n"
            "        loss.backward()\n        scaler.step(optimizer)\n        scaler.update()\n",
            "import torch\noptimizer = torch.optim.SGD(net.parameters(), lr=0.1)\nfor epoch in range(10):\n"
            "    optimizer.zero_grad()\n    for x in loader:\n        loss = net(x).sum()\n"
            "        loss.backward()\n        scaler.step(optimizer)\n        scaler.update()\n"
            "        optimizer.zero_grad(set_to_none=True)\n",
        ),
        # the backward and the step in a helper: reported, not fixed there
        Invalid(
            "import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n\ndef train_step(x):\n"
            "    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n\nfor x in loader:\n    train_step(x)\n"
        ),
    )

    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        super().__init__(context)
        self._reported: set = set()

    def visit_For(self, node: cst.For) -> None:
        self._loop(node)

    def visit_While(self, node: cst.While) -> None:
        self._loop(node)

    def _loop(self, loop: Loop) -> None:
        facts = self.facts
        if not facts.roles.optimizer_steps or not facts.roles.backwards:
            return
        steps = [(s, site) for s, site in facts.roles.steps_in(loop)
                 if owned_by(facts, loop, s.call, site) and facts.receivers.is_known_optimizer(s.optimizer, s.call)]
        if not steps:
            return
        backwards = [(b, site) for b, site in facts.roles.backwards_in(loop) if facts.values.accumulates_grad(b)]
        if not backwards or facts.regions.in_accumulate(loop) or facts.regions.accumulate_regions and any(
                facts.tree.under(r.node, [loop, *facts.calls.functions_reached(loop)])
                for r in facts.regions.accumulate_regions):
            return
        if self._resets(facts, loop):
            return
        backward = backwards[0][0]
        if id(backward.call) in self._reported:  # a helper's backward, reached from two loops
            return
        self._reported.add(id(backward.call))
        names = sorted({s.optimizer for s, _ in steps if s.optimizer})
        once = [z for z in facts.roles.zero_grads if z.target in names and not facts.tree.contains(loop, z.node)]
        where = " (the `zero_grad()` outside the loop runs only once)" if once else ""
        message = (f"`backward()` adds into `.grad` every iteration and `{names[0]}.step()` follows, but nothing "
                   f"clears the gradients per step{where}: each step applies the sum of all gradients so far "
                   f"(after k steps, k steps' worth) while peak memory stays flat - a correctness "
                   f"bug, not a leak; call `{names[0]}.zero_grad(set_to_none=True)` after the step")
        self.report(backward.call, message, self._fix(facts, loop, steps, backwards))

    @staticmethod
    def _resets(facts: Facts, loop: Loop) -> bool:
        if any(facts.roles.resets_grads(call) for call, _ in facts.calls.calls_in(loop)):
            return True
        if any(call is site and type(call.func) is cst.Attribute and dotted_name(call.func.value) == "self" and  # type: ignore[attr-defined]
               facts.scopes.resolve(call) is None for call, site in facts.calls.calls_in(loop)) and \
                not facts.scopes.sees_lineage(loop) and not facts.in_model_code(loop):
            return True  # `self.before_batch()`, inherited from a trainer base class out of sight, may clear them
        if facts.roles.step_hooked:
            return True  # a hook on the step may clear the gradients
        roots = [loop, *facts.calls.functions_reached(loop)]
        return any(type(z.node) is cst.Assign and facts.tree.under(z.node, roots) for z in facts.roles.zero_grads)

    def _fix(self, facts: Facts, loop: Loop, steps: List[Tuple[OptimizerStep, cst.Call]],
             backwards: List[Tuple[Backward, cst.Call]]) -> Optional[Fix]:
        edits = []
        done = set()
        for step, site in steps:
            statement = facts.tree.statement_of(step.call) if step.call is site else None
            if statement is None or step.optimizer is None:
                return None
            if step.optimizer in done:
                continue
            done.add(step.optimizer)
            anchor = facts.roles.after_step(step, statement)
            reset = cst.parse_statement(f"{step.optimizer}.zero_grad(set_to_none=True)")
            edits.append(InsertAfter(anchor, (reset,)))  # type: ignore[arg-type]
        first = min(facts.tree.order(site) for _, site in backwards)
        last = max(facts.tree.order(site) for _, site in steps)
        safety = Safety.SAFE if self._grads_read_only_in_step(facts, loop, first, last) else Safety.UNSAFE
        names = ", ".join(sorted(done))
        return Fix(tuple(edits), safety, f"clear the gradients after each step: `{names}.zero_grad(set_to_none=True)`",
                   min_torch=_SET_TO_NONE_SINCE)

    @staticmethod
    def _grads_read_only_in_step(facts: Facts, loop: Loop, first: int, last: int) -> bool:
        """`.grad` is read nowhere but between the backward and the step (there it stays a tensor)."""
        if any(facts.roles.grad_reads(f.body) for f in facts.calls.functions_reached(loop)):
            return False
        reads = facts.roles.grad_read_orders(facts.tree.scope_of(loop))  # the scope's, ascending
        start, end = facts.tree.span(loop)
        if reads and reads[-1] >= end:
            return False  # read after the loop
        return all(first < read < last for read in reads[bisect_left(reads, start):])
