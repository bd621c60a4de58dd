"""MEM504 oom-retry-in-except."""

from __future__ import annotations

from typing import Optional, Set

import libcst as cst

from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import show


class OomRetryInExcept(Rule):
    """
    ## What it does
    Finds the work retried inside the `except` that caught an out-of-memory error: a model
    forward, a backward (also inside a helper of the module), or a call of the function the
    failed step runs in, inside `except torch.cuda.OutOfMemoryError:` (or
    `torch.OutOfMemoryError`), or inside the branch of `except RuntimeError as e:` that tests
    `"out of memory" in str(e)`.

    ## Why is this bad?
    While the `except` block runs, the exception is alive, and its traceback holds every frame
    the failed step went through with their local variables: the activations and the graph of
    the step that did not fit. `torch.cuda.empty_cache()` cannot free them. The retry (with a
    smaller batch, or the same one) runs on top of them and usually runs out of memory again.

    ## Example
    ```python
    try:
        loss = model(x).sum()
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        loss = model(x[: len(x) // 2]).sum()
    ```

    Use instead:
    ```python
    oom = False
    try:
        loss = model(x).sum()
    except torch.cuda.OutOfMemoryError:
        oom = True  # leave the handler: the failed step's memory is freed with the exception
    if oom:
        torch.cuda.empty_cache()
        loss = model(x[: len(x) // 2]).sum()
    ```

    ## Fix
    None: where the retry goes depends on the code around it (a flag checked after the `try`,
    `continue` in a loop that retries). Not reported: a handler that only sets a flag, skips the
    batch or re-raises.

    ## Fix safety
    The rule only reports.
    """

    CODE = "MEM504"
    NAME = "oom-retry-in-except"
    MESSAGE = "retried inside the `except` that caught out of memory"
    FIX_SAFETY = None
    CLAIM = Claim.PEAK_LOWER
    REQUIRES = ("OutOfMemoryError", "out of memory", "oom", "out_of_memory")

    VALID = (
        # a flag, and the retry after the handler
        "import torch\noom = False\ntry:\n    loss = model(x).sum()\nexcept torch.cuda.OutOfMemoryError:\n"
        "    oom = True\nif oom:\n    torch.cuda.empty_cache()\n    loss = model(x[:8]).sum()\n",
        # skip the batch
        "import torch\nfor x in loader:\n    try:\n        loss = model(x).sum()\n"
        "    except torch.OutOfMemoryError:\n        torch.cuda.empty_cache()\n        continue\n",
        # re-raise what is not out of memory, log what is
        "import torch\ntry:\n    out = model(x)\nexcept RuntimeError as e:\n    if \"out of memory\" not in str(e):\n"
        "        raise\n    print(\"skipping batch\")\n",
        # a RuntimeError handler that does not test for out of memory is not one
        "import torch\ntry:\n    out = model(x)\nexcept RuntimeError:\n    out = model(x.float())\n",
        # the retry loop runs the next attempt after the handler
        "import torch\nwhile True:\n    try:\n        out = model(x[:bs])\n        break\n"
        "    except torch.cuda.OutOfMemoryError:\n        bs //= 2\n",
        # the non-OOM branch may run anything
        "import torch\ntry:\n    out = model(x)\nexcept RuntimeError as e:\n    if \"out of memory\" in str(e):\n"
        "        raise\n    out = model(x.float())\n",
    )
    INVALID = (
        Invalid("import torch\ntry:\n    loss = model(x).sum()\nexcept torch.cuda.OutOfMemoryError:\n"
                "    torch.cuda.empty_cache()\n    loss = model(x[: len(x) // 2]).sum()\n"),
        Invalid("import torch\ntry:\n    out = model(batch)\nexcept RuntimeError as e:\n"
                "    if \"CUDA out of memory\" in str(e):\n        out = model(batch[:16])\n    else:\n        raise\n"),
        # re-raise unless out of memory, then retry
        Invalid("import torch\ntry:\n    out = model(batch)\nexcept RuntimeError as e:\n"
                "    if not str(e).startswith(\"CUDA out of memory\"):\n        raise\n"
                "    torch.cuda.empty_cache()\n    out = model(batch)\n"),
        # recursion: the step calls itself from the handler
        Invalid("import torch\n\nclass Trainer:\n    def valid_step(self, sample, raise_oom=False):\n        try:\n"
                "            return self.task.valid_step(sample, self.model)\n        except RuntimeError as e:\n"
                "            if \"out of memory\" in str(e) and not raise_oom:\n"
                "                torch.cuda.empty_cache()\n"
                "                return self.valid_step(sample, raise_oom=True)\n            raise\n"),
        # the backward goes through a helper
        Invalid("import torch\n\ndef train_step(model, opt, x):\n    model(x).sum().backward()\n    opt.step()\n\n"
                "try:\n    train_step(model, opt, x)\nexcept (torch.OutOfMemoryError, ValueError):\n"
                "    train_step(model, opt, x[:4])\n"),
    )

    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        super().__init__(context)
        self._retries: Optional[Set[int]] = None

    def visit_Call(self, node: cst.Call) -> None:
        if self._retries is None:
            oom = self.facts.oom
            self._retries = {id(call) for found in oom.handlers for call in oom.retries(found)}
        if id(node) in self._retries:
            self.report(node, f"`{show(node)}` runs again inside the `except` that caught out of memory: the "
                              "traceback still holds the failed step's tensors, so the retry runs on top of them; "
                              "set a flag and retry after the `except` block")
