"""MEM403 apex-amp."""

from __future__ import annotations

import libcst as cst

from memlint.rule import Claim, Invalid, Rule

_INITIALIZE = "apex.amp.initialize"
_SCALE_LOSS = "apex.amp.scale_loss"


class ApexAmp(Rule):
    """
    ## What it does
    Finds mixed precision done with NVIDIA apex: `amp.initialize(model, optimizer, opt_level=...)`
    (and `amp.scale_loss(...)` in a module that does not call `initialize` itself).

    ## Why is this bad?
    `apex.amp` is deprecated and unmaintained; NVIDIA points to PyTorch's native AMP. Its
    `O2`/`O3` levels cast the model itself to float16 and keep float32 master copies of the
    weights inside the optimizer, and it must be built against the exact CUDA and torch
    versions in use. `torch.amp.autocast` casts per operation and keeps one float32 copy of the
    weights; `torch.amp.GradScaler` does the loss scaling.

    ## Why it is opt-in
    On real code the one finding was a helper kept for the users who still choose apex, which
    no maintainer would remove (docs/real-code.md).

    ## Example
    ```python
    from apex import amp
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()
    ```

    Use instead:
    ```python
    scaler = torch.amp.GradScaler("cuda")
    with torch.amp.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix
    None: moving to native AMP touches the model set-up, the forward and the step, and the
    `opt_level` has no one-to-one translation (O1 is closest to autocast).

    ## Fix safety
    The rule only reports.
    """

    CODE = "MEM403"
    DEFAULT_ON = False
    NAME = "apex-amp"
    MESSAGE = ("apex.amp is deprecated and unmaintained; use native mixed precision "
               "(`torch.amp.autocast` + `torch.amp.GradScaler`)")
    FIX_SAFETY = None
    CLAIM = Claim.NONE
    REQUIRES = ("apex",)

    VALID = (
        "import torch\nscaler = torch.amp.GradScaler(\"cuda\")\nwith torch.amp.autocast(\"cuda\"):\n    y = model(x)\n",
        # other apex components are not amp
        "from apex.optimizers import FusedAdam\nopt = FusedAdam(model.parameters())\n",
        "from apex.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n",
        # a local amp that is not apex's
        "from mylib import amp\nmodel, opt = amp.initialize(model, opt)\n",
        "import torch\nfrom torch import amp\nwith amp.autocast(\"cuda\"):\n    y = model(x)\n",
    )
    INVALID = (
        Invalid("from apex import amp\nmodel, optimizer = amp.initialize(model, optimizer, opt_level=\"O1\")\n"),
        Invalid("import apex\nmodel, opt = apex.amp.initialize(model, opt, opt_level=\"O2\")\n"),
        # initialize lives in another module: the loss scaling is what is left to point at
        Invalid(
            "from apex import amp\n\ndef train_step(loss, optimizer):\n"
            "    with amp.scale_loss(loss, optimizer) as scaled_loss:\n        scaled_loss.backward()\n"
            "    optimizer.step()\n"
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        name = self.facts.names.call_name(node)
        if name == _INITIALIZE:
            self.report(node)
        elif name == _SCALE_LOSS and not any(ref.call for ref in self.facts.references(_INITIALIZE)):
            self.report(node)
