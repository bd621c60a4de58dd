"""MEM602 checkpoint-without-use-reentrant."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import libcst as cst

from memlint.analysis.apicalls import ABSENT, ApiSite
from memlint.findings import Fix, Replace, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import with_keyword
from memlint.torch_target import TorchVersion

# API -> position of use_reentrant among its positional parameters (None: only by keyword)
CHECKPOINTS = {
    "torch.utils.checkpoint.checkpoint": None,
    "torch.utils.checkpoint.checkpoint_sequential": 3,
}
# the torch release whose API takes `use_reentrant` (checkpoint: 1.11; checkpoint_sequential: 2.0)
USE_REENTRANT_SINCE = {
    "torch.utils.checkpoint.checkpoint": TorchVersion(1, 11),
    "torch.utils.checkpoint.checkpoint_sequential": TorchVersion(2, 0),
}


class CheckpointWithoutUseReentrant(Rule):
    """
    ## What it does
    Finds `torch.utils.checkpoint.checkpoint(...)` and `checkpoint_sequential(...)` called
    without `use_reentrant`, under any import spelling, through a module-level alias or
    `functools.partial`, and through a function of the same module that passes its `**kwargs`
    (or a `use_reentrant` parameter left at None) on to them: then its call is reported. Not
    where a test around the call says a tensor it hands the block requires grad (OpenMMLab's
    `if self.with_cp and x.requires_grad:`, the tensor not rebound before the call): there the
    block's parameters get their gradients, and the harm the finding names cannot happen.

    ## Why is this bad?
    Left out, `use_reentrant` is True, the old implementation, and torch warns that this default
    will change. The reentrant checkpoint runs the block under `no_grad` and replays it in the
    backward, which has costs the other one has not: when no *input* of the block requires
    grad (frozen embeddings, the first block fed raw data), its output does not either, so the
    block's own parameters silently get no gradient at all. It also ignores
    `torch.autograd.grad` and keyword arguments, and cannot be nested.
    `use_reentrant=False` saves the same memory and has none of these limits.

    ## Why it is opt-in
    Read on real code (docs/real-code.md), 1 of 2 findings was worth a change: the reentrant
    variant loses gradients only where the checkpointed block's inputs need no gradient (frozen
    stages), which a linter cannot tell from the call.

    ## Example
    ```python
    from torch.utils.checkpoint import checkpoint
    x = checkpoint(block, x)
    ```

    Use instead:
    ```python
    x = checkpoint(block, x, use_reentrant=False)
    ```

    ## Fix
    Adds `use_reentrant=False` (for a wrapper: the keyword its `**kwargs` passes on, or its own
    parameter). The argument exists from torch 1.11 for `checkpoint` and from 2.0 for
    `checkpoint_sequential`: below the project's target torch the fix is not offered.

    ## Fix safety
    Unsafe: the versions differ where the reentrant one has limits code may rely on.
    Parameters that got no gradient (behind frozen inputs) start getting one and being
    updated; tensors inside lists or dicts passed to the block now take part in autograd; and
    the recomputation stops as soon as what the backward needs is recomputed, so side effects at
    the end of the block (hooks, counters) run once less.
    """

    CODE = "MEM602"
    DEFAULT_ON = False
    NAME = "checkpoint-without-use-reentrant"
    MESSAGE = "`checkpoint` without `use_reentrant` uses the reentrant version"
    FIX_SAFETY = Safety.UNSAFE
    CLAIM = Claim.NONE
    REQUIRES = ("checkpoint",)

    VALID = (
        "from torch.utils.checkpoint import checkpoint\nx = checkpoint(block, x, use_reentrant=False)\n",
        "import torch.utils.checkpoint as cp\nx = cp.checkpoint(block, x, use_reentrant=True)\n",
        "from torch.utils.checkpoint import checkpoint_sequential\ny = checkpoint_sequential(layers, 2, x, False)\n",
        "import torch\nx = torch.utils.checkpoint.checkpoint(block, x, **self.checkpoint_kwargs)\n",
        # a partial that sets it, or passes the caller's choice on
        "import functools\nfrom torch.utils.checkpoint import checkpoint\n"
        "ckpt = functools.partial(checkpoint, use_reentrant=False)\nx = ckpt(block, x)\n",
        "from functools import partial\nfrom torch.utils.checkpoint import checkpoint\n"
        "self.fn = partial(checkpoint, **gradient_checkpointing_kwargs)\n",
        # some other checkpoint
        "from .helpers import checkpoint\nx = checkpoint(block, x)\n",
        "import deepspeed\nx = deepspeed.checkpointing.checkpoint(block, x)\n",
        "import torch\ntorch.save(model.state_dict(), checkpoint_path)\ncheckpoint = torch.load(checkpoint_path)\n",
        # an input of the block requires grad wherever the reentrant checkpoint runs (OpenMMLab's
        # idiom): its output does too, and the parameters get their gradients
        "import torch.utils.checkpoint as cp\n\nclass Block(nn.Module):\n    def forward(self, x):\n"
        "        if self.with_cp and x.requires_grad:\n            out = cp.checkpoint(self._inner_forward, x)\n"
        "        else:\n            out = self._inner_forward(x)\n        return out\n",
        "from torch.utils.checkpoint import checkpoint\n"
        "h = checkpoint(self.layer, h, mask) if h.requires_grad else self.layer(h, mask)\n",
    )
    INVALID = (
        Invalid("from torch.utils.checkpoint import checkpoint\nx = checkpoint(block, x)\n",
                "from torch.utils.checkpoint import checkpoint\nx = checkpoint(block, x, use_reentrant=False)\n"),
        Invalid("import torch\nh = torch.utils.checkpoint.checkpoint(self.layer, h, mask)\n",
                "import torch\nh = torch.utils.checkpoint.checkpoint(self.layer, h, mask, use_reentrant=False)\n"),
        Invalid("from torch.utils.checkpoint import checkpoint_sequential\ny = checkpoint_sequential(layers, 4, x)\n",
                "from torch.utils.checkpoint import checkpoint_sequential\n"
                "y = checkpoint_sequential(layers, 4, x, use_reentrant=False)\n"),
        # the test that holds is about another tensor, or says no input requires grad
        Invalid("import torch.utils.checkpoint as cp\n\nclass Block(nn.Module):\n    def forward(self, x, y):\n"
                "        if self.with_cp and y.requires_grad:\n            return cp.checkpoint(self.inner, x)\n"
                "        if not x.requires_grad:\n            return cp.checkpoint(self.inner, x)\n"
                "        if x.requires_grad:\n            pass\n        else:\n"
                "            return cp.checkpoint(self.inner, x)\n        return self.inner(x)\n",
                "import torch.utils.checkpoint as cp\n\nclass Block(nn.Module):\n    def forward(self, x, y):\n"
                "        if self.with_cp and y.requires_grad:\n"
                "            return cp.checkpoint(self.inner, x, use_reentrant=False)\n"
                "        if not x.requires_grad:\n            return cp.checkpoint(self.inner, x, use_reentrant=False)\n"
                "        if x.requires_grad:\n            pass\n        else:\n"
                "            return cp.checkpoint(self.inner, x, use_reentrant=False)\n        return self.inner(x)\n"),
        # ... or about a name the branch rebinds before the call (a frozen stem under no_grad),
        # a comprehension's own name, or `checkpoint_sequential`'s segments
        Invalid("import torch\nfrom torch.utils.checkpoint import checkpoint, checkpoint_sequential\n\n"
                "def forward(self, x, chunks, segments):\n    if self.with_cp and x.requires_grad:\n"
                "        with torch.no_grad():\n            x = self.stem(x)\n        x = checkpoint(self.layer, x)\n"
                "    if x.requires_grad:\n        outs = [checkpoint(self.layer, x) for x in chunks]\n"
                "    if segments.requires_grad:\n        x = checkpoint_sequential(self.layers, segments, x)\n"
                "    return x\n",
                "import torch\nfrom torch.utils.checkpoint import checkpoint, checkpoint_sequential\n\n"
                "def forward(self, x, chunks, segments):\n    if self.with_cp and x.requires_grad:\n"
                "        with torch.no_grad():\n            x = self.stem(x)\n"
                "        x = checkpoint(self.layer, x, use_reentrant=False)\n"
                "    if x.requires_grad:\n        outs = [checkpoint(self.layer, x, use_reentrant=False) for x in chunks]\n"
                "    if segments.requires_grad:\n"
                "        x = checkpoint_sequential(self.layers, segments, x, use_reentrant=False)\n"
                "    return x\n"),
        # ... or about what a wrapper is handed, which need not reach the block
        Invalid("from torch.utils.checkpoint import checkpoint\n\ndef ckpt(fn, x, mask, **kwargs):\n"
                "    return checkpoint(fn, x, **kwargs) * mask\n\nif mask.requires_grad:\n    y = ckpt(blk, x, mask)\n",
                "from torch.utils.checkpoint import checkpoint\n\ndef ckpt(fn, x, mask, **kwargs):\n"
                "    return checkpoint(fn, x, **kwargs) * mask\n\nif mask.requires_grad:\n"
                "    y = ckpt(blk, x, mask, use_reentrant=False)\n"),
        # a wrapper that passes **kwargs on: its call is where the keyword is missing
        Invalid("from torch.utils.checkpoint import checkpoint\n\ndef ckpt(fn, *args, **kwargs):\n"
                "    return checkpoint(fn, *args, **kwargs)\n\nfor blk in blocks:\n    x = ckpt(blk, x)\n",
                "from torch.utils.checkpoint import checkpoint\n\ndef ckpt(fn, *args, **kwargs):\n"
                "    return checkpoint(fn, *args, **kwargs)\n\nfor blk in blocks:\n"
                "    x = ckpt(blk, x, use_reentrant=False)\n"),
    )

    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        super().__init__(context)
        self._sites: Optional[Dict[int, Tuple[ApiSite, str]]] = None

    def visit_Call(self, node: cst.Call) -> None:
        if self._sites is None:
            self._sites = {id(site.call): (site, api) for api, position in CHECKPOINTS.items()
                           for site in self.facts.apicalls.sites(api, "use_reentrant", position)
                           if site.given == ABSENT}
        found = self._sites.get(id(node))
        if found is None:
            return
        site, api = found
        if not site.via and self._input_requires_grad(node, api):
            return
        where = "`checkpoint`" if not site.via else f"`{site.via}` (it calls `checkpoint`)"
        fix = Fix((Replace(node, with_keyword(node, site.keyword, cst.Name("False"))),), Safety.UNSAFE,
                  f"use the non-reentrant checkpoint: `{site.keyword}=False`", min_torch=USE_REENTRANT_SINCE[api])
        self.report(node, f"{where} without `{site.keyword}` runs the reentrant version: when no input of "
                          "the block requires grad, its parameters get no gradient; pass `use_reentrant=False`",
                    fix)

    def _input_requires_grad(self, call: cst.Call, api: str) -> bool:
        """A test around the call says a tensor it hands the block requires grad (OpenMMLab's
        `if self.with_cp and x.requires_grad: out = cp.checkpoint(_inner_forward, x)`): the
        block's output then requires grad, and its parameters get theirs. Only a name handed
        by position to the API itself (what a wrapper hands on is its own affair), and only
        the value the test saw: not rebound in the branch before the call (`x = frozen(x)`
        under no_grad), nor a comprehension's own name."""
        skipped = 1 if api == "torch.utils.checkpoint.checkpoint" else 2  # (the function; the segments)
        handed = {arg.value.value for arg in call.args[skipped:]  # type: ignore[attr-defined]
                  if arg.keyword is None and not arg.star and type(arg.value) is cst.Name}
        facts = self.facts
        for test, branch in facts.guards.holding(call):
            if type(test) is not cst.Attribute or test.attr.value != "requires_grad" or \
                    type(test.value) is not cst.Name or test.value.value not in handed:  # type: ignore[attr-defined]
                continue
            name = test.value.value  # type: ignore[attr-defined]
            if not any(facts.tree.contains(branch, bind.node) for bind in facts.scopes.in_effect(name, call)) and \
                    facts.scopes.comprehension_clause(name, call) is facts.scopes.comprehension_clause(name, test):
                return True  # (the same binding: not `[checkpoint(blk, x) for x in chunks]`, a comprehension's own)
        return False

